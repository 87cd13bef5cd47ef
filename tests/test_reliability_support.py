"""Shared helpers for the reliability tests (no tests here): running ``python -m runner`` as a real
process, reading its CSV metrics, and small models that fail on purpose (selected with
``model=custom model._target_=tests.test_reliability_support.<Class>``)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from runner.models.gpt import GPT

ROOT = Path(__file__).resolve().parents[1]

# A tiny, fast run: the smoke GPT, Dynamo's eager backend, every step logged, no speedup probe.
FAST = [
    "+recipe=smoke",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "trainer.limit_val_batches=1",
    "telemetry.speedup_steps=0",
]


def env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"}


def start(run_dir: Path, *overrides: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    """Start ``python -m runner`` on ``run_dir`` (its own cwd, so nothing lands elsewhere)."""
    return subprocess.Popen(
        [sys.executable, "-m", "runner", *FAST, f"hydra.run.dir={run_dir}", *overrides],
        cwd=cwd or run_dir.parent, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def run(run_dir: Path, *overrides: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    proc = start(run_dir, *overrides)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 180) -> None:
    """Wait until ``path`` exists (the run has progressed that far) or fail with the run's output."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"{path} never appeared (rc={proc.returncode}):\n{out[-3000:]}\n{err[-6000:]}")
        time.sleep(0.05)


def losses(run_dir: Path) -> dict[int, float]:
    """step -> train/loss from the run's CSV (a resumed run appends to the same file)."""
    out: dict[int, float] = {}
    with open(run_dir / "csv" / "metrics.csv") as f:
        for row in csv.DictReader(f):
            if row.get("train/loss"):
                out[int(row["step"])] = float(row["train/loss"])
    return out


def write_corpus(path: Path, n_bytes: int = 1000) -> Path:
    """A small fixed text file: with seq_len 32 and batch 4, an epoch is 7 batches."""
    text = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n\n" for i in range(200))
    path.write_text(text[:n_bytes])
    return path


# -- models that fail on purpose ---------------------------------------------------------------------
class NaNGPT(GPT):
    """The GPT, whose logits become nan on the ``nan_at``-th forward in training (counted in a
    buffer, so the compiled step does not recompile as it counts)."""

    def __init__(self, nan_at: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nan_at = nan_at
        self.register_buffer("calls", torch.zeros((), dtype=torch.long), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = super().forward(x)
        if not self.training:
            return logits
        self.calls.add_(1)
        return logits * torch.where(self.calls == self.nan_at, torch.tensor(float("nan")), torch.tensor(1.0))


class GraphBreakGPT(GPT):
    """The GPT with an explicit graph break in its forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return super().forward(x)


class ReluGPT(GPT):
    """The GPT with a ``torch.relu`` on its logits: torch's ``relu_compile_error_TESTING_ONLY`` backend
    refuses any graph holding one, a real backend failure from a registered backend."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(super().forward(x))
