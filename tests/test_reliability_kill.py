"""``kill -9`` while a checkpoint is being written never leaves a corrupt ``last.ckpt``.

A child process writes ~48 MB checkpoints through ``AtomicCheckpointIO`` in a loop, each holding its
sequence number in every tensor; the test SIGKILLs it as soon as a save's temp file appears (so the
kill lands mid-write), then loads ``last.ckpt`` and checks it is one complete, self-consistent
checkpoint: the previous one.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from tests.test_reliability_support import env

WRITER = """
import sys, torch
from runner.reliability import AtomicCheckpointIO
io, path = AtomicCheckpointIO(), sys.argv[1]
w = [torch.empty(1_000_000) for _ in range(12)]  # built once: the loop is (almost) all writing
for i in range(10_000):
    for t in w:
        t.fill_(float(i))
    io.save_checkpoint({"i": i, "w": w}, path)
    print(i, flush=True)
"""


def _kill_mid_write(path: Path, saves: int) -> bool:
    """Start the writer, let ``saves`` checkpoints complete, SIGKILL it as soon as the next save's
    temp file appears (mid-write). True if that temp file is still there afterwards."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], env=env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for i in range(saves):
        assert proc.stdout.readline().strip() == str(i)  # checkpoint i is complete
    deadline = time.monotonic() + 30
    while not list(path.parent.glob(f".{path.name}.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # A temp file left on disk is the save the kill interrupted.
    return bool(list(path.parent.glob(f".{path.name}.*.tmp")))


def test_kill_9_mid_write_leaves_a_loadable_last_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints" / "last.ckpt"
    mid_write = 0
    for attempt, saves in enumerate((1, 2)):
        mid_write += _kill_mid_write(path, saves)
        ckpt = torch.load(path, weights_only=True)  # a truncated file would raise here
        assert all(bool((w == ckpt["i"]).all()) for w in ckpt["w"]), f"attempt {attempt}: torn checkpoint"
        assert len(ckpt["w"]) == 12
        assert ckpt["i"] == saves - 1, "the last complete save, not the interrupted one"
    assert mid_write >= 1, "no kill landed mid-write; the test proved nothing"
    # The killed writers' temp files are not checkpoints (Lightning's ckpt_path=last ignores them) and
    # the next save removes them.
    from runner.reliability.checkpoint_io import atomic_torch_save, remove_stale_temps

    atomic_torch_save({"i": -1}, path)
    assert remove_stale_temps(path) == []
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]
