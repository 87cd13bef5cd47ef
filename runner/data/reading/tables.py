"""Reading a table ``Source`` into a Hugging Face ``datasets.Dataset`` (memory-mapped Arrow, prepared once and read from
``datasets``' cache on every later run, ``HF_DATASETS_CACHE``): ``.jsonl``, ``.csv``, ``.parquet`` through ``datasets``'
own builders, a ``save_to_disk`` folder through ``load_from_disk``; a file that cannot be read is a ``DataError``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.config.errors import close_matches
from runner.data.reading.sources import SAVED, VALIDATION_SPLITS, DataError, Source
from runner.data.reading.table_errors import bad_utf8, json_object_of_rows, not_text, not_utf8, unreadable
from runner.data.store.progress import Heartbeat

log = logging.getLogger(__name__)

@contextlib.contextmanager
def quiet_datasets() -> Iterator[None]:
    """``datasets`` without progress bars or log lines (runner says what it read); its settings put back after."""
    import datasets
    from datasets.utils import logging as dlog

    verbosity, bars = dlog.get_verbosity(), datasets.is_progress_bar_enabled()
    dlog.set_verbosity(dlog.CRITICAL)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        dlog.set_verbosity(verbosity)
        if bars:
            datasets.enable_progress_bars()


def fingerprint(*parts: Any) -> str:
    """A short hash of JSON-able ``parts`` (file names, sizes, times, settings): a cache file's name."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def in_memory_rows(columns: dict[str, list[Any]]) -> Any:
    """``columns`` (each a list of Python values) as an in-memory ``datasets.Dataset``, what
    ``datasets.Dataset.from_dict`` makes, named (its ``fingerprint``) by a hash of the values."""
    import datasets
    import pyarrow as pa

    digest = hashlib.sha256()
    for name, values in columns.items():
        digest.update(json.dumps([name, values], default=str).encode())
    return datasets.Dataset(pa.table(columns), fingerprint=digest.hexdigest()[:20])


def file_stamps(files: Any) -> list[tuple[str, int, int]]:
    """Each file's path, size and modification time: a cache made from them is stale when any changes."""
    return [(str(f), os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files]


class Said:
    """Log lines about a table, kept with it: a table is read once per process (the checks before a run read it first),
    and its lines are said the first time logging would show them (the run's console and log file are set up after those
    checks), not lost to a logger nobody listens to yet."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, str, tuple[Any, ...]]] = []
        self.said = False

    def add(self, level: int, message: str, *args: Any) -> None:
        self.lines.append((level, message, args))

    def say(self) -> None:
        if self.said or not (log.isEnabledFor(logging.INFO) and log.hasHandlers()):
            return
        self.said = True
        for level, message, args in self.lines:
            log.log(level, message, *args)


# Tables this process has read, by their files' stamps: the checks before a run and the run itself read a table once
# (and say once where it came from, where the user sees it)
_LOADED: dict[str, tuple[Any, bool, Said]] = {}


def load_table(source: Source) -> tuple[Any, bool]:
    """The rows of a table source as a memory-mapped ``datasets.Dataset``, and whether they came from the cache."""
    files = sorted(f for f in source.files[0].rglob("*") if f.is_file()) if source.kind == SAVED else source.files
    key = fingerprint(source.kind, file_stamps(files))
    if key not in _LOADED:
        said = Said()
        _LOADED[key] = (*_load_table(source, said), said)
    rows, cached, said = _LOADED[key]
    said.say()
    return rows, cached


def _load_table(source: Source, said: Said) -> tuple[Any, bool]:
    import datasets

    with quiet_datasets():
        if source.kind == SAVED:
            loaded = datasets.load_from_disk(str(source.files[0]))
            if isinstance(loaded, datasets.DatasetDict):
                if "train" not in loaded:
                    raise DataError(f"{source.key}={source.given} is a saved DatasetDict without a train split (its "
                                    f"splits: {', '.join(loaded)}): give one split's folder, "
                                    f"{source.key}={Path(source.given) / next(iter(loaded))}.")
                said.add(logging.INFO, "data: %s=%s: a DatasetDict; %s", source.key, source.given,
                         split_note(source, list(loaded)))
                loaded = loaded["train"]
            return loaded, True
        try:
            builder = datasets.load_dataset_builder(source.kind, data_files=[str(f) for f in source.files])
            cached = os.path.exists(builder.cache_dir)
            start = time.perf_counter()
            size = sum(f.stat().st_size for f in source.files)
            with Heartbeat(f"reading {source.key}={source.given} ({size / 1e6:,.0f} MB) into Arrow"):
                if not cached and size >= APART_BYTES:
                    _prepare_apart(source)  # the same cache entry; a failure there is said again below
                builder.download_and_prepare()
                if source.kind == "json":  # pyarrow reads JSON lines' bytes into text unchecked, to fail later
                    _refuse_bad_utf8(source)
            rows = builder.as_dataset(split="train")
        except DataError:
            raise
        except Exception as e:  # pyarrow's and pandas' many errors for a damaged or empty file
            raise unreadable(source, e) from e
    if cached:
        said.add(logging.INFO, "data: %s=%s read from the cache (%s): nothing to prepare", source.key, source.given,
                 builder.cache_dir)
    else:
        said.add(logging.INFO, "data: prepared %d rows of %s=%s as Arrow in %.1f s (%s)", len(rows), source.key,
                 source.given, time.perf_counter() - start, builder.cache_dir)
    return rows, cached


def _refuse_bad_utf8(source: Source) -> None:
    """A ``DataError`` where a byte of ``source``'s files is not UTF-8; looked for once per state of the files (the
    answer is kept beside the stores), so a later run on a cached table reads it instead of the files."""
    from runner.data.store import remembered

    bad = remembered(f"utf8-{fingerprint(file_stamps(source.files))}", lambda: bad_utf8(source.files))
    if bad is not None:
        raise not_utf8(source, tuple(bad))  # type: ignore[arg-type]


APART_BYTES = 64 << 20  # Tables from this size are turned into Arrow in a process of their own


def _prepare_apart(source: Source) -> None:
    """``datasets``' conversion of a large table into Arrow, in a fresh process: its working memory (about half the
    file's size) is that process's, not the run's, and is returned when it ends."""
    import subprocess
    import sys

    code = ("import sys, datasets; datasets.disable_progress_bars(); datasets.load_dataset_builder(sys.argv[1], "
            "data_files=sys.argv[2:]).download_and_prepare()")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([sys.executable, "-c", code, source.kind, *map(str, source.files)], capture_output=True,
                       timeout=24 * 3600, check=False)


def split_note(source: Source, splits: list[str]) -> str:
    """What a saved ``DatasetDict``'s splits do: ``train`` trains; its own validation split validates (for
    ``data.path``, unless ``data.val_path`` names other files); the others are not read."""
    others = [s for s in splits if s != "train"]
    if source.key != "data.path":
        return f"its train split validates (others, not read: {', '.join(others) or 'none'})"
    own = next((s for s in VALIDATION_SPLITS if s in splits), None)
    rest = [s for s in others if s != own]
    unread = f"; not read: {', '.join(rest)}" if rest else ""
    if own is None:
        return (f"its train split trains{unread} (no validation split: data.val_path={Path(source.given) / 'NAME'} "
                "validates on split NAME, else a split of train)")
    return f"its train split trains, its {own} split validates (where data.val_path names no other files){unread}"


def check_column(rows: Any, column: str, setting: str, source: Source) -> None:
    """``column`` is one of the rows' columns; a ``DataError`` with a did-you-mean when it is not."""
    names = list(rows.column_names)
    if column in names:
        return
    if (nested := json_object_of_rows(source)) is not None:  # {"data": [...]}: one row to datasets
        raise DataError(nested)
    matches = close_matches(column, names)
    hint = f"Did you mean {setting}={matches[0]}? " if matches else ""
    raise DataError(f"{setting}={column}: {source.key}={source.given} has no column {column}. {hint}Its columns: "
                    f"{', '.join(names) or 'none'}. Set {setting} to the column that holds it.")


def text_lengths(rows: Any, column: str, source: Source, setting: str) -> Any:
    """Each row's text in ``column`` as its UTF-8 byte count (0 for a missing value), from the column's offsets,
    streamed from the table's files; a ``DataError`` when the column holds no text."""
    import numpy as np
    import pyarrow as pa

    from runner.data.store import table_batches

    check_column(rows, column, setting, source)
    data = rows.data.column(column)
    if not (pa.types.is_string(data.type) or pa.types.is_large_string(data.type) or pa.types.is_binary(data.type)
            or pa.types.is_large_binary(data.type)):
        raise DataError(f"{setting}={column}: the column {column} of {source.key}={source.given} holds "
                        f"{not_text(data)}, not text. Make every {column} a string (a missing one null: it is left "
                        f"out and counted), or set {setting} to the column that holds the text.")
    wide = pa.types.is_large_string(data.type) or pa.types.is_large_binary(data.type)
    parts = []
    for batch in table_batches(rows, [column]):
        for chunk in getattr(batch.column(0), "chunks", [batch.column(0)]):
            if not len(chunk):
                continue
            offsets = np.frombuffer(chunk.buffers()[1], np.int64 if wide else np.int32)[chunk.offset:chunk.offset +
                                                                                         len(chunk) + 1]
            lengths = np.diff(offsets).astype(np.int64)
            if chunk.null_count:  # a null's offsets need not be equal
                lengths[chunk.is_null().to_numpy(zero_copy_only=False)] = 0
            parts.append(lengths)
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def null_rows(rows: Any, column: str) -> Any:
    """Which rows' ``column`` is null (a missing text), as a boolean array."""
    import pyarrow.compute as pc

    return pc.is_null(rows.data.column(column)).to_numpy(zero_copy_only=False)
