"""A store prepared once, whoever asks for it: the ranks of a run, two runs on the same data, a killed run's next."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from runner.atomic_files import DiskFullError, disk_full
from runner.data.store.arrays import INFO, Store
from runner.hub import local_rank

log = logging.getLogger(__name__)

STALL_S = 600.0  # Seconds a waiter accepts without progress (no progress line, no finished store) before it gives up
POLL_S = 0.2


class PrepareTimeout(TimeoutError):
    """Waited for another process to prepare a store, and it made no progress for ``STALL_S`` seconds."""


def progress_file(directory: Path) -> Path:
    """Where the builder of ``directory`` says how far it got (and that it is alive)."""
    return directory.with_name(directory.name + ".progress")


def is_complete(directory: Path) -> bool:
    return (directory / INFO).is_file()


def prepared(directory: Path, build: Callable[[Path], None], what: str, stall_s: float = STALL_S,
             rank: int | None = None) -> tuple[Store, bool]:
    """The store at ``directory`` and whether this process built it; ``build(tmp)`` writes a complete store into the
    directory ``tmp``."""
    directory = Path(directory)
    if is_complete(directory):
        return Store(directory), False
    rank = local_rank() if rank is None else rank
    if rank != 0:
        _wait(directory, what, stall_s, f"local rank {rank} waits for local rank 0")
        return Store(directory), False
    directory.parent.mkdir(parents=True, exist_ok=True)
    with _locked(directory, what, stall_s):
        if is_complete(directory):  # another run built it while this one waited
            return Store(directory), False
        for stale in directory.parent.glob(f".{directory.name}.*.partial"):  # a killed builder's
            shutil.rmtree(stale, ignore_errors=True)
        tmp = directory.with_name(f".{directory.name}.{os.getpid()}.partial")
        try:
            build(tmp)
            if not is_complete(tmp):
                raise RuntimeError(f"preparing {what} wrote no {INFO} into {tmp}")
            if directory.exists():  # an incomplete directory of an older version of this code
                shutil.rmtree(directory)
            os.rename(tmp, directory)
        except OSError as e:
            full = disk_full(e)
            if full is None:
                raise
            raise DiskFullError(full.errno, f"{full.strerror} while preparing {what} into {directory.parent}: "
                                "nothing was kept. Free space there, or point HF_DATASETS_CACHE at a disk with "
                                "room (the data takes about 1 to 4 bytes a token), then run again.") from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                progress_file(directory).unlink()
    return Store(directory), True


def origin(store: Store, built: bool) -> str:
    """Where a store ``prepared`` returned came from, to follow its data's name in the log: tokenized now (how long, in
    how many processes), or read from the cache."""
    if built:
        return (f": tokenized in {store.meta['seconds']:.1f} s ({store.meta['processes']} processes), stored in "
                f"{store.directory}")
    return f" read from the cache ({store.directory}): not tokenized again"


@contextlib.contextmanager
def _locked(directory: Path, what: str, stall_s: float) -> Iterator[None]:
    """``DIRECTORY.lock`` held, waiting (bounded by progress) while another process holds it."""
    lock = directory.with_name(directory.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _wait(directory, what, stall_s, "another process holds its lock", lock_fd=fd)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _wait(directory: Path, what: str, stall_s: float, why: str, lock_fd: int | None = None) -> None:
    """Until the store is complete (or, with ``lock_fd``, the lock is this process's), giving up once nothing has moved
    for ``stall_s`` seconds."""
    progress = progress_file(directory)
    last_seen, last_change = _mtime(progress), time.monotonic()
    log.info("data: %s: %s is being prepared by another process (%s); waiting for it", what, directory, why)
    while True:
        if lock_fd is not None:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
        elif is_complete(directory):
            return
        seen = _mtime(progress)
        if seen != last_seen:
            last_seen, last_change = seen, time.monotonic()
        if time.monotonic() - last_change > stall_s:
            raise PrepareTimeout(
                f"data: {what}: waited {stall_s:.0f} s for another process to prepare {directory} ({why}), and it "
                f"made no progress in that time ({progress} did not change): it was stopped or is stuck. Look at "
                "that process (local rank 0 of this machine, or another run on the same data) and its log; once it "
                f"is gone, start again: the next run prepares the data itself (or delete {directory.parent} to "
                "start from nothing).")
        time.sleep(POLL_S)


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None
