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

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Optional

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

PathLike = str | Path  # what Lightning's checkpoint I/O passes (its private _PATH)

_TMP_SUFFIX = ".tmp"


def _temp_prefix(target: Path) -> str:
    # Hidden and not ending in .ckpt: Lightning's ``ckpt_path="last"`` lookup never picks it up.
    return f".{target.name}."


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself (the directory entry); not possible on every platform."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_stale_temps(target: Path) -> list[Path]:
    """Delete temp files an interrupted writer of ``target`` left behind; returns what was removed.
    One process writes a run's checkpoints (rank 0), so any such file is stale."""
    removed = []
    for p in target.parent.glob(f"{_temp_prefix(target)}*{_TMP_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            removed.append(p)
    return removed


def atomic_torch_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save(obj, path)`` that either fully replaces ``path`` or leaves it untouched."""
    _atomic_write(path, lambda f: torch.save(obj, f))


def atomic_write_bytes(data: bytes, path: str | os.PathLike[str]) -> None:
    """Write ``data`` to ``path`` atomically (same guarantees as :func:`atomic_torch_save`)."""
    _atomic_write(path, lambda f: f.write(data))


def _atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(target)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=_TMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise_if_disk_full(e, target, f"{target.name} is unchanged")
        raise
    _fsync_dir(target.parent)


_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class DiskFullError(OSError):
    """A run's file could not be written for lack of space (disk, quota or file-size limit)."""


def disk_full(exc: BaseException) -> OSError | None:
    """The out-of-space ``OSError`` behind ``exc``: itself, or one it was raised from or while handling
    (``torch.save`` reports a failed write as a ``RuntimeError`` about zip offsets)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _DISK_FULL:
            return e
        e = e.__cause__ or e.__context__
    return None


def raise_if_disk_full(exc: BaseException, target: Path, kept: str) -> None:
    """Raise a :class:`DiskFullError` saying what is on disk and how to go on, if ``exc`` is one."""
    full = disk_full(exc)
    if full is not None and not isinstance(exc, DiskFullError):
        raise DiskFullError(full.errno, f"{full.strerror} while writing {target}; {kept}. Free space (or raise the "
                            "quota or file-size limit), then resume in place: the same overrides plus "
                            "hydra.run.dir=<run dir> ckpt_path=last") from exc


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
