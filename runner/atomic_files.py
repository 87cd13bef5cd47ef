"""Files written atomically and durably: a temp file beside the target, fsynced, ``os.replace``d over it, the
directory fsynced; so a kill mid-write never leaves half a file, and a full disk is one :class:`DiskFullError`."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

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
    """Delete temp files an interrupted writer of ``target`` left behind (one process writes it); what was removed."""
    removed = []
    for p in target.parent.glob(f"{_temp_prefix(target)}*{_TMP_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            removed.append(p)
    return removed


def atomic_write_bytes(data: bytes, path: str | os.PathLike[str], mode: int | None = None,
                       one_writer: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`), with file ``mode`` if given."""
    atomic_write(path, lambda f: f.write(data), mode, one_writer)


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], object], mode: int | None = None,
                 one_writer: bool = True) -> None:
    """``write`` a file that fully replaces ``path`` or leaves it untouched; ``one_writer`` (only this process writes
    it): leftover temp files are a killed writer's, and removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if one_writer:
        remove_stale_temps(target)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=_TMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
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


