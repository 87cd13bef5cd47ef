"""TensorBoard event files cut back to a checkpoint on resume, so that no step is shown twice.

Records are kept byte for byte (their CRCs stay valid): those on disk when the checkpoint was written, then those
whose step is below the checkpoint's. A record cut short by a kill ends the file."""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.reliability.checkpoint_io import atomic_write_bytes, remove_stale_temps

EVENT_FILE_GLOB = "events.out.tfevents.*"
_HEADER = 12  # uint64 length + uint32 masked CRC of the length
_FOOTER = 4  # uint32 masked CRC of the data


def event_files(log_dir: str | os.PathLike[str]) -> list[Path]:
    """The TensorBoard event files directly in ``log_dir``, sorted by name (i.e. by creation time)."""
    return sorted(p for p in Path(log_dir).glob(EVENT_FILE_GLOB) if p.is_file() and not p.name.startswith("."))


def _event_class() -> Any:
    try:
        from tensorboard.compat.proto.event_pb2 import Event
    except ImportError:  # Lightning's TensorBoardLogger also runs on tensorboardX alone
        from tensorboardX.proto.event_pb2 import Event
    return Event


def records(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(start, end, serialized event) of each whole record in an event file's bytes."""
    pos = 0
    while pos + _HEADER <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        end = pos + _HEADER + length + _FOOTER
        if end > len(data):
            return  # cut short by a kill
        yield pos, end, data[pos + _HEADER: pos + _HEADER + length]
        pos = end


def logged_tags(path: Path) -> set[tuple[str, int]]:
    """(tag, step) of every summary value in an event file."""
    event = _event_class()
    out: set[tuple[str, int]] = set()
    for _, _, payload in records(path.read_bytes()):
        e = event.FromString(payload)
        out.update((v.tag, e.step) for v in e.summary.value)
    return out


def cut_events(path: Path, keep_bytes: int, before_step: int,
               relogged: set[tuple[str, int]] | frozenset[tuple[str, int]] = frozenset()) -> tuple[int, int]:
    """Cut one event file back to a checkpoint, also dropping the summaries in ``relogged`` (logged again by the
    resumed process). Returns (events kept, events dropped)."""
    event = _event_class()
    remove_stale_temps(path)  # a cut killed before its rename: TensorBoard reads any name holding "tfevents"
    data = path.read_bytes()
    kept: list[bytes] = []
    dropped = summaries = 0
    for start, end, payload in records(data):
        e = event.FromString(payload)
        header = e.WhichOneof("what") == "file_version"
        again = any((v.tag, e.step) in relogged for v in e.summary.value)
        if header or (not again and (start < keep_bytes or e.step < before_step)):
            kept.append(data[start:end])
            summaries += not header
        else:
            dropped += 1
    out = b"".join(kept)
    if summaries == 0:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    elif out != data:
        atomic_write_bytes(out, path)
    return summaries, dropped
