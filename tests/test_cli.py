"""``python -m runner`` as a user runs it: real subprocesses, real Hydra, real loggers, CPU; what ends before a run
starts (refusals, ``--cfg``, ``--list-recipes``) through the same entry point in this process (``tests/cli.py``)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.cli import run_cli

ROOT = Path(__file__).resolve().parents[1]


def runner(*args: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _rows(metrics: Path) -> list[dict[str, str]]:
    with metrics.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_smoke_recipe_leaves_a_complete_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = runner("+recipe=smoke", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The progress bar names the epoch without Lightning's "Epoch 0/-2" for step-bounded runs.
    assert "Epoch 0" in proc.stdout and "/-2" not in proc.stdout
    assert (run_dir / ".hydra" / "config.yaml").exists()
    rows = _rows(run_dir / "csv" / "metrics.csv")
    assert any(r.get("train/loss") for r in rows) and any(r.get("val/bpb") for r in rows)
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 8
    report = json.loads((run_dir / "report.json").read_text())
    assert report["run/steps"] == 8
    assert report["val/bpb"] > 0 and report["data/unigram_bpb"] > 0
    assert report["compile/scope"] == "step"
    assert "runner: smoke" in proc.stdout  # the printed summary table
    assert "val bits per byte" in proc.stdout
    hparams = (run_dir / "csv" / "hparams.yaml").read_text()  # the config, as every logger's hyperparameters
    assert "scope: step" in hparams and "n_layer: 2" in hparams and "policy: automatic" in hparams


@pytest.mark.slow
def test_mlp_on_synthetic_data(tmp_path: Path) -> None:
    run_dir = tmp_path / "mlp"
    proc = runner("+recipe=smoke_mlp", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["run/steps"] == 8 and report["compile/scope"] == "step"


def test_list_recipes() -> None:
    proc = run_cli("--list-recipes", cwd=ROOT)
    assert proc.returncode == 0
    assert "quickstart" in proc.stdout and "smoke" in proc.stdout


def test_cfg_job_prints_the_composed_config() -> None:
    proc = run_cli("+recipe=quickstart", "--cfg", "job", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "scope: step" in proc.stdout and "n_layer: 4" in proc.stdout


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("compile.scop=step", "scop"),
        ("compile=stepp", "did you mean `compile=step`?"),
        ("trainer.max_steps=abc", "max_steps"),
        ("data.path=/does/not/exist", "data.path"),
    ],
)
def test_bad_input_fails_before_anything_is_written(override: str, named: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "never"
    proc = run_cli("+recipe=smoke", override, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 2
    assert named in proc.stderr and "Traceback" not in proc.stderr
    assert not run_dir.exists() and not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_dynamic_documents_recipe_one_graph_for_every_length(tmp_path: Path) -> None:
    """The recipe as shipped (strict dynamic on per-document batches), shrunk to seconds: varying
    lengths, one graph, no recompile after warm-up (fail_on_recompile would have stopped the run)."""
    run_dir = tmp_path / "docs"
    proc = runner("+recipe=dynamic_documents", "compile.backend=eager", "trainer.max_steps=14",
                  "dynamic.warmup_steps=3", "data.max_bytes=300000", "data.batch_size=4",
                  "trainer.val_check_interval=7", "trainer.limit_val_batches=2", "model.n_layer=2", "model.n_embd=32",
                  "model.n_head=2", "telemetry.speedup_steps=2", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["run/steps"] == 14
    assert report["dynamic/policy"] == "dynamic" and report["dynamic/after_warmup"] == "fail_on_recompile"
    assert report["dynamic/graphs"] == 1 and report["dynamic/recompiles"] == 0
    # Length-grouped batches padded to their own longest: 1.1% measured (dynamic=static: 48.8%).
    assert 0 <= report["dynamic/padding_waste_pct"] < 5


# Every way in that composes a config: the same one paragraph for a misspelt key or option, exit 2, nothing written.
ENTRY_POINTS: list[tuple[list[str], str]] = [
    (["--cfg", "job", "+recipe=smoke", "trainer.max_step=5"], "did you mean `trainer.max_steps=5`?"),
    (["+recipe=smoke", "trainer.max_step=5", "--info"], "did you mean `trainer.max_steps=5`?"),
    (["-m", "+recipe=smoke", "trainer.max_step=5"], "did you mean `trainer.max_steps=5`?"),
    # a later value of a sweep: Hydra composes every job before the first runs, and stopped with its traceback
    (["-m", "+recipe=smoke", "compile=eager,stepp"], "did you mean `compile=step`?"),
    (["tune", "+recipe=smoke", "trainer.max_step=5"], "did you mean `trainer.max_steps=5`?"),
]


@pytest.mark.parametrize(("args", "advice"), ENTRY_POINTS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_every_entry_point_names_a_misspelt_key_in_one_paragraph(args: list[str], advice: str, tmp_path: Path) -> None:
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("runner: invalid configuration: "), proc.stderr[-3000:]
    assert advice in lines[0] and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == [], "nothing may be written (no outputs/ run, sweep or tune dir)"


def test_cfg_job_prints_a_config_that_would_not_run() -> None:
    """``--cfg job`` composes and converts (a misspelt key is refused) but shows a combination that fails
    validation, so that the user can see what it is."""
    proc = run_cli("--cfg", "job", "+recipe=smoke", "trainer.max_steps=0", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "max_steps: 0" in proc.stdout
