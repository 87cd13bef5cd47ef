"""A crash inside a training step, and a full disk, in real ``python -m runner`` processes; each run is
then resumed in place with ``ckpt_path=last`` and must reach ``max_steps`` with every metric row it
had written, once.

* ``crash``: the model raises on its 7th training forward (step 6). The process exits 1 with the
  error; the rows of steps 0-5 are on disk; ``last.ckpt`` is the periodic checkpoint of step 6.
* ``disk_full_checkpoint`` / ``disk_full_csv``: a full disk is simulated with ``RLIMIT_FSIZE`` (a write
  past the limit fails with EFBIG, as one on a full disk fails with ENOSPC), set in the process right
  after checkpoint 5 lands: just below the checkpoint's size (the next checkpoint write fails part-way)
  or a few bytes above ``metrics.csv``'s size (the next row's append fails part-way). The process exits
  1 with an error that says what is on disk and how to resume; ``last.ckpt`` is checkpoint 5, whole;
  no temp file is left; ``metrics.csv`` holds exactly its rows of that moment, none torn.

All three runs start at once, then the three resumes.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from runner.models.gpt import GPT
from tests.test_reliability_support import FAST, env

MAX_STEPS = 12
LIMIT_AFTER_CHECKPOINT = 5


class CrashGPT(GPT):
    """The GPT, raising on its ``crash_at``-th training forward unless ``done_file`` exists (which it then
    creates): the resumed run trains through."""

    def __init__(self, crash_at: int = 7, done_file: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.crash_at, self.done_file, self.calls = crash_at, Path(done_file), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
            if self.calls == self.crash_at and not self.done_file.exists():
                self.done_file.touch()
                raise RuntimeError(f"injected failure in training forward {self.calls}")
        return super().forward(x)


# Runs ``python -m runner`` (argv[2:]); after the n-th checkpoint lands, copies metrics.csv aside and
# lowers RLIMIT_FSIZE as argv[1] says.
CHILD = r"""
import json, os, resource, shutil, signal, sys
spec = json.loads(sys.argv[1])
csv_path = os.path.join(spec["run_dir"], "csv", "metrics.csv")
real_replace, saves = os.replace, [0]

def replace(src, dst):
    real_replace(src, dst)
    if os.path.basename(str(dst)) == "last.ckpt":
        saves[0] += 1
        if saves[0] == spec["after"]:
            shutil.copy(csv_path, spec["snapshot"])
            full = os.path.getsize(dst) - 1 if spec["full"] == "checkpoint" else os.path.getsize(csv_path) + 8
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), no signal
            resource.setrlimit(resource.RLIMIT_FSIZE, (full, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

os.replace = replace
sys.argv = ["runner", *sys.argv[2:]]
from runner.__main__ import main
main()
"""

RUNS = ["crash", "disk_full_checkpoint", "disk_full_csv"]


def _start(base: Path, name: str, resume: bool = False) -> subprocess.Popen[str]:
    """Start run ``name``; its resume runs plain ``python -m runner`` (the disk has room again)."""
    run_dir = base / name
    overrides = [*FAST, f"hydra.run.dir={run_dir}", f"trainer.max_steps={MAX_STEPS}"]
    if name == "crash":
        overrides += ["trainer.checkpoint_every_n_steps=2", "compile=eager", "model=custom",
                      f"model._target_={__name__}.CrashGPT", f"+model.done_file={base / 'crashed'}"]
    else:
        overrides += ["trainer.checkpoint_every_n_steps=1"]
    if resume:
        args = [sys.executable, "-m", "runner", *overrides, "ckpt_path=last"]
    elif name == "crash":
        args = [sys.executable, "-m", "runner", *overrides]
    else:
        spec = {"run_dir": str(run_dir), "after": LIMIT_AFTER_CHECKPOINT, "full": name.removeprefix("disk_full_"),
                "snapshot": str(base / f"{name}.csv")}
        args = [sys.executable, "-c", CHILD, json.dumps(spec), *overrides]
    return subprocess.Popen(args, cwd=base, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def _train_steps(rows: list[dict[str, str]]) -> list[int]:
    return [int(r["step"]) for r in rows if r.get("train/loss")]


def _step(run_dir: Path) -> int:
    return int(torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.mktemp("failures")
    procs = {name: _start(base, name) for name in RUNS}
    out: dict[str, dict[str, Any]] = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        run_dir = base / name
        out[name] = {"rc": proc.returncode, "output": stdout + stderr, "run_dir": run_dir,
                     "ckpt_step": _step(run_dir), "rows": _rows(run_dir / "csv" / "metrics.csv"),
                     "csv_bytes": (run_dir / "csv" / "metrics.csv").read_bytes(),
                     "temps": [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")],
                     "snapshot": base / f"{name}.csv"}
    resumes = {name: _start(base, name, resume=True) for name in RUNS}
    for name, proc in resumes.items():
        stdout, stderr = proc.communicate(timeout=300)
        out[name]["resumed"] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out


@pytest.mark.slow
def test_crash_inside_a_step_exits_with_the_error_and_resumes_from_the_periodic_checkpoint(
        runs: dict[str, dict[str, Any]]) -> None:
    run = runs["crash"]
    assert run["rc"] == 1, run["output"][-4000:]
    assert "injected failure in training forward 7" in run["output"]
    assert run["ckpt_step"] == 6  # the periodic checkpoint before the failing step
    assert _train_steps(run["rows"]) == list(range(6)), "the rows of the steps before the crash are on disk"
    resumed = run["resumed"]
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert _step(run["run_dir"]) == MAX_STEPS
    assert _train_steps(_rows(run["run_dir"] / "csv" / "metrics.csv")) == list(range(MAX_STEPS))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["disk_full_checkpoint", "disk_full_csv"])
def test_full_disk_stops_with_whole_files_and_resumes(runs: dict[str, dict[str, Any]], name: str) -> None:
    run = runs[name]
    assert run["rc"] == 1, run["output"][-4000:]
    assert "File too large while writing" in run["output"] and "ckpt_path=last" in run["output"]
    failed = "last.ckpt" if name == "disk_full_checkpoint" else "metrics.csv"
    assert f"{failed}; " in run["output"], "the error names the file it could not write"
    assert run["ckpt_step"] == LIMIT_AFTER_CHECKPOINT and not run["temps"]
    snapshot = run["snapshot"].read_bytes()  # metrics.csv as checkpoint 5 landed
    if name == "disk_full_csv":
        assert run["csv_bytes"] == snapshot, "the failed append changed metrics.csv"
    else:  # rows went on being appended until the next checkpoint failed
        assert run["csv_bytes"].startswith(snapshot) and len(run["csv_bytes"]) > len(snapshot)
    assert run["csv_bytes"].endswith(b"\n")
    resumed = run["resumed"]
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert _step(run["run_dir"]) == MAX_STEPS
    final = _rows(run["run_dir"] / "csv" / "metrics.csv")
    steps = _train_steps(final)
    assert len(steps) == len(set(steps)) and set(steps) >= set(range(LIMIT_AFTER_CHECKPOINT, MAX_STEPS))
    before = {json.dumps({k: v for k, v in r.items() if v}, sort_keys=True) for r in run["rows"]
              if int(r["step"]) < LIMIT_AFTER_CHECKPOINT}
    after = [json.dumps({k: v for k, v in r.items() if v}, sort_keys=True) for r in final]
    assert all(after.count(r) == 1 for r in before), "a row written before the disk filled up was lost"
