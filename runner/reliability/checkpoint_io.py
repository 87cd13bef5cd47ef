"""Checkpoints written atomically: a ``kill -9`` mid-write never leaves a corrupt ``last.ckpt``.

Lightning's ``TorchCheckpointIO`` (2.6) writes through a temp file in the system temp dir and ``shutil.move``,
which copies across filesystems and fsyncs nothing; here the temp file is in the checkpoint's own directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from runner.atomic_files import atomic_write

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
