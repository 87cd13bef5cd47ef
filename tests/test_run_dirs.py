"""Every run its own directory (issue 75): two runs started together (two processes, a queue, a sweep's jobs in another
process) never share one, and a directory that holds a run already is never reused without a word."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runner.config.composing.run_dirs import (
    NAME_MAX_BYTES,
    SWEEP_DIR_KEY,
    ClaimRunDir,
    claim,
    job_dir_name,
    taken_error,
)
from tests.cli import run_cli

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["+recipe=smoke", "compile.backend=eager", "telemetry.speedup_steps=0", "data.max_bytes=20000"]


def test_a_claimed_directory_is_one_processes_and_the_next_gets_the_next_name(tmp_path: Path) -> None:
    wanted = tmp_path / "2026-01-01" / "12-00-00-smoke"
    got: list[Path] = []
    threads = [threading.Thread(target=lambda: got.append(claim(wanted, "smoke"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = sorted(p.name for p in got)
    assert names == sorted(["12-00-00-smoke", *(f"12-00-00_{n}-smoke" for n in range(2, 9))])  # each once
    assert all(p.is_dir() and not any(p.iterdir()) for p in got)
    assert claim(tmp_path / "sweep", None).name == "sweep" and claim(tmp_path / "sweep", None).name == "sweep_2"


def test_a_directory_holding_a_run_is_refused_unless_it_is_resumed(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    held = tmp_path / "held"
    (held / ".hydra").mkdir(parents=True)
    (held / "report.json").write_text("{}")
    work = tmp_path / "work"
    work.mkdir()
    out = run_cli(*SMOKE, f"hydra.run.dir={held}", cwd=work)
    assert out.returncode == 2 and list(work.iterdir()) == [], out.stderr[-2000:]
    message = out.stderr.strip().splitlines()[-1]
    assert f"hydra.run.dir={held} holds a run already (.hydra, report.json)" in message, message
    assert f"runner resume {held}" in message and "Give another directory" in message
    assert taken_error([f"hydra.run.dir={held}", "ckpt_path=last"]) is None  # resuming it in place
    assert taken_error([f"hydra.run.dir={tmp_path / 'new'}"]) is None and taken_error([]) is None
    assert taken_error([f"hydra.run.dir={held}/${{now:%H}}"]) is None  # a pattern: claimed, not reused
    assert "holds a sweep already" in (taken_error([f"hydra.sweep.dir={held}"], multirun=True) or "")
    monkeypatch.setenv("LOCAL_RANK", "1")  # a rank Lightning started into rank 0's directory
    assert taken_error([f"hydra.run.dir={held}"]) is None


def test_a_sweep_directory_is_claimed_for_the_sweep_and_each_of_its_jobs(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir

    from runner.config.composing.layers import CONF_DIR
    from runner.config.composing.store import register_configs

    register_configs()
    (tmp_path / "sweep").mkdir()  # another sweep started in the same second
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        pattern = f"hydra.sweep.dir={tmp_path}/sweep" + "${oc.env:RUNNER_NO_SUCH_VARIABLE,''}"  # a pattern
        cfg = compose("config", overrides=[pattern], return_hydra_config=True)
    ClaimRunDir().on_multirun_start(config=cfg)
    assert cfg.hydra.sweep.dir == str(tmp_path / "sweep_2") and (tmp_path / "sweep_2").is_dir()
    assert cfg.hydra.overrides.hydra[-1] == f"{SWEEP_DIR_KEY}={tmp_path / 'sweep_2'}"  # each job's config reads it


def test_a_sweep_jobs_directory_name_is_one_path_component() -> None:
    """A value's ``/`` read as ``_`` (an absolute ``model.path`` nested a directory per ``/``, issue 85); a name past
    the file system's limit keeps the overrides that fit. The multirun itself: ``tests/test_summary_consistency.py``."""
    assert job_dir_name("model.path=/data/x/y,optimizer.lr=0.1") == "model.path=_data_x_y,optimizer.lr=0.1"
    long = job_dir_name(",".join(f"data.path=/data/{'é' * 40}/{n}.jsonl" for n in range(8)))
    assert "/" not in long and len(long.encode()) <= NAME_MAX_BYTES and long.endswith(".jsonl,...")
    assert job_dir_name("") == ""


@pytest.mark.slow
def test_two_runs_started_together_get_a_directory_each(tmp_path: Path) -> None:
    """Two real processes at once, the run directory's pattern the same for both (as the default's is for runs
    started in the same second): two directories, each with its own config, log and report."""
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "WANDB_MODE": "offline"}
    procs = [subprocess.Popen([sys.executable, "-m", "runner", *SMOKE, f"trainer.max_steps={steps}",
                               "hydra.run.dir=outputs/together-${name}"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for steps in (2, 3)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-2000:] for o in outs]
    dirs = sorted((tmp_path / "outputs").iterdir())
    assert [d.name for d in dirs] == ["together-smoke", "together_2-smoke"]
    steps = set()
    for d in dirs:
        report = json.loads((d / "report.json").read_text())
        overrides = (d / ".hydra" / "overrides.yaml").read_text()
        assert f"trainer.max_steps={report['run/steps']}" in overrides  # its own config, its own report
        steps.add(report["run/steps"])
        (log,) = d.glob("*.log")
        assert log.read_text().count("compile stack: scope=step") == 1  # one run's log, not two mixed
    assert steps == {2, 3}
