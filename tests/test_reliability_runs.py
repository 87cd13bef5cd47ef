"""Non-finite losses and compile failures in real ``python -m runner`` processes (all started at
once). Models that fail on purpose live in tests/test_reliability_support.py."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import torch

from tests.test_reliability_support import start

SUPPORT = "tests.test_reliability_support"
RUNS: dict[str, list[str]] = {
    "nan_stop": ["model=custom", f"model._target_={SUPPORT}.NaNGPT", "+model.nan_at=4"],
    "nan_skip": ["model=custom", f"model._target_={SUPPORT}.NaNGPT", "+model.nan_at=4",
                 "reliability=skip_nonfinite"],
    "fullgraph_break": ["model=custom", f"model._target_={SUPPORT}.GraphBreakGPT", "compile.fullgraph=true"],
    "backend_raise": ["model=custom", f"model._target_={SUPPORT}.ReluGPT",
                      "compile.backend=relu_compile_error_TESTING_ONLY"],
    "backend_eager": ["model=custom", f"model._target_={SUPPORT}.ReluGPT",
                      "compile.backend=relu_compile_error_TESTING_ONLY", "compile.on_error=eager"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[subprocess.CompletedProcess[str], Path]]:
    base = tmp_path_factory.mktemp("runs")
    procs = {name: start(base / name, *overrides) for name, overrides in RUNS.items()}
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        out[name] = (subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), base / name)
    return out


def _message(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("runner: ")]
    assert len(lines) == 1, proc.stderr[-4000:]
    return lines[0]


@pytest.mark.slow
def test_nonfinite_loss_stops_with_step_and_last_good_checkpoint(runs: dict) -> None:
    proc, run_dir = runs["nan_stop"]
    assert proc.returncode == 4, proc.stderr[-4000:]
    msg = _message(proc)
    assert "non-finite training loss (nan) at step 4" in msg
    assert "after step 3" in msg and "reliability.on_nonfinite=skip" in msg and "ckpt_path=last" in msg
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == 3
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())


@pytest.mark.slow
def test_nonfinite_loss_skips_the_step_and_goes_on(runs: dict) -> None:
    proc, run_dir = runs["nan_skip"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "non-finite training loss (nan) at step 4: step skipped" in proc.stdout + proc.stderr
    report = json.loads((run_dir / "report.json").read_text())
    assert report["reliability/skipped_steps"] == [4]
    assert report["run/steps"] == 8
    assert math.isfinite(report["train/loss"])
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())


@pytest.mark.slow
def test_graph_break_under_fullgraph_names_frame_reason_and_fix(runs: dict) -> None:
    proc, _ = runs["fullgraph_break"]
    assert proc.returncode == 3, proc.stderr[-4000:]
    msg = _message(proc)
    assert "compile failed in frame 'training_step'" in msg
    assert "test_reliability_support.py" in msg and "graph_break()" in msg  # the user line that broke
    assert "graph break" in msg and "compile.fullgraph=false" in msg and "compile.on_error=eager" in msg
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_backend_failure_raises_with_frame_reason_and_fix(runs: dict) -> None:
    proc, _ = runs["backend_raise"]
    assert proc.returncode == 3, proc.stderr[-4000:]
    msg = _message(proc)
    assert "compile failed in frame 'training_step'" in msg
    assert "backend 'relu_compile_error_TESTING_ONLY' failed" in msg
    assert "compile.on_error=eager" in msg


@pytest.mark.slow
def test_backend_failure_under_on_error_eager_falls_back_and_is_logged(runs: dict) -> None:
    proc, run_dir = runs["backend_eager"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "runs eagerly (compile.on_error=eager)" in proc.stdout + proc.stderr
    report = json.loads((run_dir / "report.json").read_text())
    assert report["run/steps"] == 8
    assert report["compile/fallbacks"] >= 1
    assert any("ReluCompileError" in r["reason"] or "relu" in r["reason"].lower()
               for r in report["compile/fallback_reasons"]), report["compile/fallback_reasons"]
