"""FSDP2 with the compile stack on 2 CPU processes (gloo), and its config.

Three multi-process runs carry the checks (each costs tens of seconds here):
- Dynamo's eager backend (``tests/fsdp_fit.py``): per-step losses equal single-process training on
  the same global batches, 0 graph breaks, the same graphs and recompiles on both ranks, DTensor
  parameters, the fused optimizer step chosen by ``auto``, and ``consolidated.pt`` loads strictly
  into an eager model and equals the single-process model's weights;
- Inductor, the same script over fewer steps;
- ``python -m runner +recipe=smoke trainer=fsdp``: SIGTERM to rank 0 alone, then resume from the
  sharded ``last.ckpt`` with ``ckpt_path=last``; the losses equal an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from runner.build import build_strategy
from runner.config import ConfigError, compose, load
from runner.config.schema import FsdpMixedPrecision
from runner.stack.shard import resolve_mixed_precision
from runner.strategy import FSDPCompileStrategy
from tests.helpers import tiny_module
from tests.test_reliability_support import FAST, losses, write_corpus

ROOT = Path(__file__).resolve().parents[1]
SHARDED = {"__0_0.distcp", "__1_0.distcp", ".metadata", "meta.pt"}  # one file per rank, the index, Lightning's
LOSS_RTOL = 1e-5  # fp32 on both sides; only the order of the gradient sums differs (observed <= 2e-7)


def _fit(backend: str, out: Path, steps: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "tests.fsdp_fit", backend, str(out), str(steps)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def _check_parity_and_compile(result: dict[str, Any], steps: int, rtol: float) -> None:
    assert result["steps"] == steps
    fsdp, ref = torch.tensor(result["fsdp_losses"]), torch.tensor(result["reference_losses"])
    print(f"max |loss diff| FSDP2 2 ranks vs 1 process over {steps} steps: {(fsdp - ref).abs().max().item():.3g}")
    torch.testing.assert_close(fsdp, ref, rtol=rtol, atol=0)
    rank0, rank1 = result["compile"]
    for rank in (rank0, rank1):
        assert rank["graph_breaks"] == 0
        assert rank["param_type"] == "DTensor" and rank["block_compiled"]
        assert rank["optimizer"] == "fused" and "DTensor" in rank["optimizer_reason"]
    assert rank0["graphs"] == rank1["graphs"] >= 1
    assert rank0["recompiles"] == rank1["recompiles"]


def _check_consolidated(result: dict[str, Any]) -> None:
    assert result["consolidated_keys"] == sorted(tiny_module().state_dict())  # no _orig_mod., no wrapper names
    assert result["consolidated_types"] == ["Tensor"]  # no DTensor
    assert result["consolidated_vs_reference"] < 1e-5


@pytest.mark.slow
def test_fsdp_two_ranks_eager_backend_match_one_process(tmp_path: Path) -> None:
    result = _fit("eager", tmp_path, steps=8)
    _check_parity_and_compile(result, 8, LOSS_RTOL)
    _check_consolidated(result)
    assert result["checkpoints"] == ["step=4.ckpt", "step=8.ckpt"]
    assert {p.name for p in (tmp_path / "ckpt" / "step=4.ckpt").iterdir()} >= SHARDED


@pytest.mark.slow
def test_fsdp_two_ranks_inductor(tmp_path: Path) -> None:
    result = _fit("inductor", tmp_path, steps=4)
    _check_parity_and_compile(result, 4, rtol=1e-4)  # Inductor's fused kernels round differently (observed ~1e-7)
    _check_consolidated(result)


def _start(run_dir: Path, *overrides: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"}
    return subprocess.Popen([sys.executable, "-m", "runner", *FAST, f"hydra.run.dir={run_dir}", *overrides],
                            cwd=run_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


@pytest.mark.slow
def test_fsdp_sigterm_to_one_rank_then_resume_matches_uninterrupted(tmp_path: Path) -> None:
    steps = 12
    corpus = write_corpus(tmp_path / "corpus.txt")
    overrides = ["trainer=fsdp", "compile=blocks", f"trainer.max_steps={steps}", f"data.path={corpus}",
                 "trainer.checkpoint_every_n_steps=4", "trainer.val_check_interval=6", "offload.measure=false"]
    full = _start(tmp_path / "full", *overrides)
    stopped = _start(tmp_path / "stopped", *overrides)
    last = tmp_path / "stopped" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 240
    while not last.exists() and stopped.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(stopped.pid, signal.SIGTERM)  # rank 0 only: the ranks must still agree on one step
    out, err = stopped.communicate(timeout=240)
    assert stopped.returncode == 143, err[-4000:]
    assert "Traceback" not in err, err[-4000:]
    assert {p.name for p in last.iterdir()} >= SHARDED
    assert not list(last.parent.glob(".last.ckpt.*"))  # the atomic save left nothing behind
    resumed = _start(tmp_path / "stopped", *overrides, "ckpt_path=last")
    r_out, r_err = resumed.communicate(timeout=240)
    f_out, f_err = full.communicate(timeout=240)
    assert full.returncode == 0, f_err[-4000:]
    assert resumed.returncode == 0, r_err[-4000:]
    assert "Restored all states" in r_err
    a, b = losses(tmp_path / "full"), losses(tmp_path / "stopped")
    assert sorted(a) == sorted(b) == list(range(steps))
    resumed_from = int(torch.load(last / "meta.pt", weights_only=False)["global_step"])
    assert resumed_from > 0
    diff = max(abs(a[s] - b[s]) for s in range(steps))
    print(f"interrupted and resumed: max |loss diff| over {steps} steps = {diff:.3g}")
    torch.testing.assert_close(torch.tensor([b[s] for s in range(steps)]), torch.tensor([a[s] for s in range(steps)]),
                               rtol=1e-5, atol=1e-6)
    report = json.loads((tmp_path / "stopped" / "report.json").read_text())
    assert report["fsdp/world_size"] == 2 and report["compile/graph_breaks"] == 0
    state = torch.load(tmp_path / "stopped" / "checkpoints" / "consolidated.pt", weights_only=True)
    assert state and all(k.startswith("model.") and type(v) is torch.Tensor for k, v in state.items())


# -- config: composes, builds, refuses what cannot work -------------------------------------------------
def test_trainer_fsdp_builds_the_fsdp_strategy(tmp_path: Path) -> None:
    cfg = load(compose(["+recipe=fsdp", "trainer.fsdp.reshard_after_forward=false"], run_dir=str(tmp_path)))
    strategy = build_strategy(cfg)
    assert isinstance(strategy, FSDPCompileStrategy)
    assert strategy.reshard_after_forward is False and strategy.mixed_precision is FsdpMixedPrecision.auto
    assert strategy.process_group_backend == "gloo"


@pytest.mark.parametrize(("override", "names"), [
    ("compile=step", "compile=blocks"),
    ("compile=step_backward", "compile=blocks"),
    ("cudagraphs=reduce_overhead", "cudagraphs=disabled"),
    ("trainer.precision=16-mixed", "trainer.precision=bf16-mixed"),
    ("compile.compiled_autograd=true", "compile.compiled_autograd=false"),
    ("offload=bf16", "offload=checkpoint"),
    ("offload=fp8", "offload=checkpoint"),
])
def test_fsdp_refuses_what_cannot_work_on_shards(override: str, names: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        load(compose(["+recipe=fsdp", override], run_dir=str(tmp_path)))


def test_mixed_precision_follows_the_trainer() -> None:
    auto = FsdpMixedPrecision.auto
    assert resolve_mixed_precision(auto, "bf16-mixed") is FsdpMixedPrecision.bf16
    assert resolve_mixed_precision(auto, "32-true") is FsdpMixedPrecision.none
    assert resolve_mixed_precision(FsdpMixedPrecision.bf16, "32-true") is FsdpMixedPrecision.bf16
