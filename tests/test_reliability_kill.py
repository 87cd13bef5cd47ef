"""``kill -9`` while a checkpoint is being written never leaves a corrupt ``last.ckpt``.

A child process writes checkpoints through ``AtomicCheckpointIO``, each holding its sequence number
in every tensor. The save to interrupt stops at an exact point and says so on stdout, where it
waits for the kill: part-way through writing its bytes (``mid_write``), or with every byte written
but not yet renamed over ``last.ckpt`` (``before_rename``). The test then SIGKILLs it and checks
that ``last.ckpt`` is one complete, self-consistent checkpoint: the previous one (or none at all
when the very first save was killed). No timing decides where the kill lands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from tests.test_reliability_support import env

TENSORS, NUMEL = 12, 100_000  # 4.8 MB per checkpoint
PAUSE_AFTER_BYTES = 1_000_000  # mid_write: the interrupted save has written this much, then waits

# The product's save path, unchanged; only the file object it writes through (``os.fdopen``) and the
# final ``os.replace`` are wrapped, so the interrupted save can announce where it is and wait there.
WRITER = """
import os, sys, time, torch
from runner.reliability import AtomicCheckpointIO

path, pause_at, point, pause_after, tensors, numel = sys.argv[1], int(sys.argv[2]), sys.argv[3], *map(int, sys.argv[4:])
save = {"i": -1}

def wait_for_kill(what):
    print("paused", what, flush=True)
    time.sleep(3600)
    raise SystemExit("never killed")

class PausingFile:
    def __init__(self, f):
        self.f, self.written = f, 0
    def write(self, data):
        data = bytes(data)
        if point == "mid_write" and save["i"] == pause_at and self.written + len(data) >= pause_after:
            self.f.write(data[: pause_after - self.written])
            self.f.flush()
            os.fsync(self.f.fileno())  # these bytes are on disk: the temp file is half written
            wait_for_kill(pause_after)
        self.written += len(data)
        return self.f.write(data)
    def __getattr__(self, name):
        return getattr(self.f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()

real_fdopen, real_replace = os.fdopen, os.replace
os.fdopen = lambda fd, *a, **k: PausingFile(real_fdopen(fd, *a, **k))

def replace(src, dst):
    if point == "before_rename" and save["i"] == pause_at:
        wait_for_kill(os.path.getsize(src))
    real_replace(src, dst)

os.replace = replace
io = AtomicCheckpointIO()
w = [torch.empty(numel) for _ in range(tensors)]
for i in range(pause_at + 1):
    save["i"] = i
    for t in w:
        t.fill_(float(i))
    io.save_checkpoint({"i": i, "w": w}, path)
    print(i, flush=True)
"""


def _temps(path: Path) -> list[Path]:
    return list(path.parent.glob(f".{path.name}.*.tmp"))


def _kill_at(path: Path, pause_at: int, point: str) -> int:
    """Let saves 0..pause_at-1 complete, SIGKILL the writer where save ``pause_at`` waits; return the
    size of the temp file the interrupted save left."""
    sizes = map(str, (PAUSE_AFTER_BYTES, TENSORS, NUMEL))
    args = [sys.executable, "-c", WRITER, str(path), str(pause_at), point, *sizes]
    proc = subprocess.Popen(args, env=env(), stdout=subprocess.PIPE, text=True)
    watchdog = threading.Timer(300, proc.kill)  # a writer that never gets there fails the test, never hangs it
    watchdog.start()
    try:
        assert proc.stdout is not None
        for i in range(pause_at):
            assert proc.stdout.readline().strip() == str(i)  # checkpoint i is complete
        # readline blocks until the writer is at the pause point (or it died: then "" fails here).
        assert proc.stdout.readline().startswith("paused "), "the writer never reached the pause point"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    (temp,) = _temps(path)  # the interrupted save's bytes never went to last.ckpt
    return temp.stat().st_size


@pytest.mark.slow
@pytest.mark.parametrize("point", ["mid_write", "before_rename"])
def test_kill_9_during_a_save_leaves_the_previous_checkpoint(tmp_path: Path, point: str) -> None:
    path = tmp_path / "checkpoints" / "last.ckpt"
    size = _kill_at(path, pause_at=2, point=point)
    complete = os.path.getsize(path)
    if point == "mid_write":
        assert size == PAUSE_AFTER_BYTES < complete  # killed with the checkpoint half written
    else:
        assert size == complete  # killed with every byte written, before the rename
    ckpt = torch.load(path, weights_only=True)  # a truncated file would raise here
    assert ckpt["i"] == 1, "the last complete save, not the interrupted one"
    assert len(ckpt["w"]) == TENSORS and all(bool((w == 1).all()) for w in ckpt["w"]), "torn checkpoint"
    # The killed writer's temp file is not a checkpoint (Lightning's ckpt_path=last ignores it) and
    # the next save removes it.
    from runner.atomic_files import remove_stale_temps
    from runner.reliability.checkpoint_io import atomic_torch_save

    atomic_torch_save({"i": -1}, path)
    assert remove_stale_temps(path) == []
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]


@pytest.mark.slow
def test_kill_9_during_the_first_save_leaves_no_checkpoint(tmp_path: Path) -> None:
    """Nothing to fall back to: no last.ckpt at all, rather than a truncated one."""
    path = tmp_path / "checkpoints" / "last.ckpt"
    assert _kill_at(path, pause_at=0, point="mid_write") == PAUSE_AFTER_BYTES
    assert not path.exists()
