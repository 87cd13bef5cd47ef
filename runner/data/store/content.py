"""What a file holds, as a digest: the key of everything prepared from it, so that a cache is named by content."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from runner.data.store.progress import Heartbeat

BLOCK = 16 << 20  # Bytes per chained block (16 MiB): what is read again of an appended file's old content, as a check
SEED = b"runner content digest 1"
LARGE = 1 << 30  # Bytes to read from which the console hears how long it takes (about a second a gigabyte)


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _chain(state: bytes, f: Any, blocks: int, buffer: bytearray) -> tuple[bytes, int, bytes]:
    """Hashes full blocks of ``f`` (at the start of block ``blocks``) into ``state``; returns the new state, the count
    of full blocks and the tail (the last, partial block)."""
    view = memoryview(buffer)
    while True:
        n = f.readinto(buffer)
        while n < BLOCK:  # a short read before the end of the file
            more = f.readinto(view[n:])
            if not more:
                break
            n += more
        if n < BLOCK:
            return state, blocks, bytes(view[:n])
        h = hashlib.sha256(state)
        h.update(view)
        state, blocks = h.digest(), blocks + 1


def _close(state: bytes, tail: bytes, size: int) -> str:
    h = hashlib.sha256(state)
    h.update(tail)
    h.update(size.to_bytes(8, "little"))
    return h.hexdigest()


def _hashed(path: Path, st: os.stat_result, record: dict[str, Any] | None) -> dict[str, Any]:
    """The record of ``path`` as it is now (``st``): hashed from ``record``'s last full block where the file only grew,
    else from its start."""
    buffer = bytearray(BLOCK)
    with path.open("rb") as f:
        state, blocks = hashlib.sha256(SEED).digest(), 0
        if record is not None and st.st_size > record["stamp"][0]:
            start = record["blocks"] * BLOCK
            f.seek(start)
            old_tail = f.read(record["stamp"][0] - start)
            if _close(bytes.fromhex(record["state"]), old_tail, record["stamp"][0]) == record["digest"]:
                state, blocks = bytes.fromhex(record["state"]), record["blocks"]  # appended to: go on from there
            f.seek(blocks * BLOCK)
        large = st.st_size - blocks * BLOCK > LARGE
        with Heartbeat(f"reading {path.name} ({st.st_size / 1e9:.1f} GB) for its digest") if large else \
                contextlib.nullcontext():
            state, blocks, tail = _chain(state, f, blocks, buffer)
    return {"stamp": _stamp(st), "state": state.hex(), "blocks": blocks,
            "digest": _close(state, tail, blocks * BLOCK + len(tail))}


def digests(files: Iterable[Path], index: Path) -> list[str]:
    """Each file's digest."""
    paths = [Path(f).resolve() for f in files]
    entry = index / f"{hashlib.sha256(json.dumps([str(p) for p in paths]).encode()).hexdigest()[:32]}.json"
    records = read_record(entry) or {}
    out, changed = [], False
    for path in paths:
        st = os.stat(path)
        record = records.get(str(path))
        if record is None or record["stamp"] != _stamp(st):
            records[str(path)] = record = _hashed(path, st, record)
            changed = True
        out.append(str(record["digest"]))
    if changed:
        write_record(entry, records)
    return out


def files_digest(files: Iterable[Path], index: Path, names: bool = False) -> str:
    """One digest of several files' contents in their order (``names``: their file names as well, where a name says what
    a file is, as a tokenizer's do)."""
    files = list(files)
    found = digests(files, index)
    parts = [[Path(f).name, d] for f, d in zip(files, found, strict=True)] if names else found
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def read_record(entry: Path) -> dict[str, Any] | None:
    """The JSON object at ``entry``; None when it cannot be read."""
    try:
        return dict(json.loads(entry.read_text()))
    except (OSError, ValueError):
        return None


def write_record(entry: Path, record: dict[str, Any]) -> None:
    """Atomically (a reader never sees half a record; of two writers of one record, the last wins)."""
    from runner.atomic_files import atomic_write_bytes

    with contextlib.suppress(OSError):  # a read-only cache: the record is right, only not remembered
        atomic_write_bytes(json.dumps(record).encode(), entry, one_writer=False)
