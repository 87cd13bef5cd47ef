"""Checkpoints written atomically: a ``kill -9`` mid-write never leaves a corrupt ``last.ckpt``.

Lightning's ``TorchCheckpointIO`` (2.6) serialises into memory, then writes through an fsspec
transaction: the bytes go to ``tempfile.mkstemp()`` (the system temp dir, not the checkpoint's
directory) and are moved into place with ``shutil.move``. That is a rename only when both are on one
filesystem; across filesystems (a tmpfs ``/tmp``, a network run dir) ``shutil.move`` copies into the
destination, so a kill mid-copy truncates the checkpoint. Nothing is fsynced either, so a power loss
can leave a renamed but empty file, and a killed writer leaves a checkpoint-sized file in ``/tmp``.

``AtomicCheckpointIO`` writes to a hidden temp file in the checkpoint's own directory, fsyncs it,
``os.replace``s it over the target (atomic on POSIX within one filesystem) and fsyncs the directory.
Temp files that a killed writer left behind are removed at the next save. Remote paths
(``s3://...``) keep Lightning's behaviour.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from runner.atomic_files import (  # noqa: F401  (the run's other writers import them from here too)
    DiskFullError,
    atomic_write,
    atomic_write_bytes,
    disk_full,
    raise_if_disk_full,
    remove_stale_temps,
)

PathLike = str | Path  # what Lightning's checkpoint I/O passes (its private _PATH)


def atomic_torch_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save(obj, path)`` that either fully replaces ``path`` or leaves it untouched."""
    atomic_write(path, lambda f: torch.save(obj, f))


def is_local(path: PathLike) -> bool:
    """Whether ``path`` is on the local filesystem (a plain path or ``file://``)."""
    return "://" not in str(path) or str(path).startswith("file://")


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local saves are atomic and durable (see the module docstring).
    Pass it as ``Trainer(plugins=[AtomicCheckpointIO()])``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike,
                        storage_options: Optional[Any] = None) -> None:
        if storage_options is not None or not is_local(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_torch_save(checkpoint, str(path).removeprefix("file://"))
