"""Interruption and resume with real processes: SIGINT, SIGTERM and ``kill -9`` sent to running
``python -m runner`` jobs; each is resumed with ``ckpt_path=last`` and its per-step losses (from the
CSV) are compared with an uninterrupted run's. The corpus is small (7 batches per epoch) so the 16
steps cross two epoch boundaries, and compile is on (scope=step, Dynamo's eager backend).

All the runs of one scenario start at once (the uninterrupted one and the three to interrupt), so
the module costs about as much wall time as two sequential runs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.test_reliability_support import losses, start, wait_for, write_corpus

STEPS = 16


@dataclass
class Interrupted:
    run_dir: Path
    returncode: int
    output: str
    """stdout + stderr (Hydra logs to stdout, Lightning and torch to stderr)."""
    resumed: subprocess.CompletedProcess[str]
    ckpt_step: int
    rows_before_resume: dict[int, float]
    report: dict[str, object]
    """The interrupted run's report.json (the resumed run rewrites it)."""


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Interrupted | Path]:
    base = tmp_path_factory.mktemp("resume")
    corpus = write_corpus(base / "corpus.txt")
    # The interrupted runs are given far more steps than they take (a constant learning rate, so their steps are a
    # 16-step run's) and resume to step 16: a signal that lands late on a loaded machine still lands inside the fit.
    overrides = [f"data.path={corpus}", "scheduler=constant", "trainer.checkpoint_every_n_steps=5",
                 "trainer.val_check_interval=6"]
    sigs = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL}
    full = start(base / "full", *overrides, f"trainer.max_steps={STEPS}")
    procs = {name: start(base / name, *overrides, "trainer.max_steps=100000",
                         *(["logger=wandb"] if name == "sigint" else []))
             for name in sigs}
    # A checkpoint on disk (step 5) means the run is past compile and training: interrupt it then.
    pending = dict(procs)
    while pending:
        for name, proc in list(pending.items()):
            ckpt = base / name / "checkpoints" / "last.ckpt"
            if ckpt.exists() or proc.poll() is not None:
                wait_for(ckpt, proc)  # fails with the run's output if it died instead
                proc.send_signal(sigs[name])
                del pending[name]
        time.sleep(0.05)
    out: dict[str, Interrupted | Path] = {"full": base / "full"}
    finished = {name: proc.communicate(timeout=240) for name, proc in procs.items()}
    resumes = {}
    reports: dict[str, dict[str, object]] = {}
    for name in sigs:
        ckpt = torch.load(base / name / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
        csv = base / name / "csv" / "metrics.csv"
        rows = losses(base / name) if csv.exists() else {}
        report = base / name / "report.json"
        reports[name] = json.loads(report.read_text()) if report.exists() else {}
        resuming = start(base / name, *overrides, f"trainer.max_steps={STEPS}", "ckpt_path=last")
        resumes[name] = (resuming, int(ckpt["global_step"]), rows)
    full_out, full_err = full.communicate(timeout=240)
    assert full.returncode == 0, full_err[-4000:]
    for name, (proc, step, rows) in resumes.items():
        stdout, stderr = proc.communicate(timeout=240)
        resumed = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        output = finished[name][0] + finished[name][1]
        out[name] = Interrupted(base / name, procs[name].returncode, output, resumed, step, rows, reports[name])
    return out


def _get(scenario: dict[str, Interrupted | Path], name: str) -> Interrupted:
    run = scenario[name]
    assert isinstance(run, Interrupted)
    return run


@pytest.mark.slow
@pytest.mark.parametrize(("name", "code"), [("sigint", 130), ("sigterm", 143)])
def test_signal_checkpoints_flushes_and_exits_cleanly(scenario: dict[str, Interrupted | Path], name: str,
                                                      code: int) -> None:
    run = _get(scenario, name)
    assert run.returncode == code, run.output[-4000:]
    assert "Traceback" not in run.output, run.output[-4000:]
    assert f"interrupted at step {run.ckpt_step}" in run.output
    assert "ckpt_path=last" in run.output  # says how to resume
    assert 0 < run.ckpt_step < STEPS
    # Every step up to the interruption reached the CSV before the process exited.
    assert sorted(run.rows_before_resume) == list(range(run.ckpt_step))
    assert run.report["run/interrupted_by"] == name.upper()
    assert run.report["run/interrupted_at_step"] == run.ckpt_step


@pytest.mark.slow
def test_sigint_flushes_wandb_offline_files(scenario: dict[str, Interrupted | Path]) -> None:
    run = _get(scenario, "sigint")
    files = sorted((run.run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert files, "no wandb offline run was written"
    first = files[0].read_bytes()  # the interrupted run's (the resumed run adds a second one)
    assert b"train/loss" in first
    assert len(first) > 1000


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sigint", "sigterm", "sigkill"])
def test_resumed_run_matches_uninterrupted_losses(scenario: dict[str, Interrupted | Path], name: str) -> None:
    run = _get(scenario, name)
    if name == "sigkill":
        assert run.returncode == -signal.SIGKILL, "the run must have been killed mid-training"
    assert run.resumed.returncode == 0, run.resumed.stderr[-4000:]
    assert "Restored all states" in run.resumed.stderr
    full = losses(scenario["full"])  # type: ignore[arg-type]
    resumed = losses(run.run_dir)
    assert sorted(full) == list(range(STEPS))
    # A graceful stop flushed its rows, so the CSV holds every step; after kill -9 only the rows the
    # killed run had flushed (Lightning writes them when it checkpoints) precede the resumed ones.
    if name == "sigkill":
        assert set(range(run.ckpt_step, STEPS)) <= set(resumed) <= set(range(STEPS))
    else:
        assert sorted(resumed) == list(range(STEPS)), "one CSV, rows before and after the resume"
    steps = range(run.ckpt_step, STEPS)  # the steps the resumed process computed
    a = torch.tensor([full[s] for s in steps])
    b = torch.tensor([resumed[s] for s in steps])
    print(f"{name}: resumed at step {run.ckpt_step}; max |loss diff| over steps {run.ckpt_step}-{STEPS - 1} = "
          f"{(a - b).abs().max().item():.3g}")
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
