"""Reading a table ``Source`` into a memory-mapped ``datasets.Dataset`` (prepared once into ``datasets``' cache):
``.jsonl``, ``.csv``, ``.parquet`` or a ``save_to_disk`` folder; an unreadable file is a ``DataError`` naming why."""

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
from runner.data.store.progress import Heartbeat

log = logging.getLogger(__name__)


def cell_text(value: Any) -> str:
    """A table cell as text (bytes decoded, None empty)."""
    return "" if value is None else value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


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

    from runner.data.store.parallel import table_batches

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


# What is wrong with a table, in the words of the paragraph that refuses it.
_FORMAT = {"json": "JSON lines (or a JSON array)", "csv": "CSV", "parquet": "Parquet"}
_KINDS = {"int": "a number", "float": "a number", "bool": "true or false", "list": "a list", "dict": "an object"}


def unreadable(source: Source, e: BaseException) -> DataError:
    """The paragraph for a table ``datasets`` could not read: an empty file, or a damaged one."""
    what = _FORMAT.get(source.kind, source.kind)
    error = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if source.kind in ("json", "csv") and (bad := bad_utf8(source.files)) is not None:
        return not_utf8(source, bad)
    if isinstance(e, StopIteration) or "empty" in error.lower() or all(f.stat().st_size == 0 for f in source.files):
        return DataError(f"{source.key}={source.given} holds no rows ({what}). Point {source.key} at a file with "
                         "data in it.")
    if source.kind == "json" and (found := bad_json_line(source.files)) is not None:
        path, line, why = found
        where = f"{source.key}={source.given}" + ("" if len(source.files) == 1 else f": {path}")
        fix = ("A .json file may hold one array of objects: fix the JSON at that line." if "JSON array" in why else
               "Each line of a JSON lines file is one JSON object (a .json file may hold one array of them instead): "
               "fix or remove that line.")
        return DataError(f"{where}, line {line}: {why}. {fix}")
    return DataError(f"{source.key}={source.given} cannot be read as {what} ({type(e).__name__}: {error}). The file "
                     f"is damaged or not {what}: export it again (e.g. DataFrame.to_parquet / to_csv / to_json with "
                     "lines=True), or give it the suffix of its real format.")


BLOCK_BYTES = 1 << 22  # Bytes ``bad_utf8`` decodes at a time (4 MiB)


def bad_utf8(files: Any) -> tuple[str, int, int, int] | None:
    """The first byte of ``files`` that is not UTF-8: its file, line (from 1), offset in the file (from 0) and value;
    None when every file is UTF-8."""
    for path in files:
        at, line, carry = 0, 1, b""
        with open(path, "rb") as f:
            while True:
                block = f.read(BLOCK_BYTES)
                data = carry + block
                cut = data.rfind(b"\n") + 1 if block else len(data)  # at the end: the rest, newline or not
                piece, carry = data[:cut], data[cut:]
                if not piece.isascii():  # ASCII, most tables' bytes, is UTF-8 without decoding
                    try:
                        piece.decode("utf-8")
                    except UnicodeDecodeError as e:
                        return str(path), line + piece.count(b"\n", 0, e.start), at + e.start, piece[e.start]
                at, line = at + len(piece), line + piece.count(b"\n")
                if not block:
                    break
    return None


def not_utf8(source: Source, bad: tuple[str, int, int, int]) -> DataError:
    """The paragraph for a table with a byte that is not UTF-8: where it is, and how to convert the file."""
    path, line, offset, value = bad
    where = f"{source.key}={source.given}" + ("" if len(source.files) == 1 else f": {path}")
    return DataError(f"{where}, line {line}: the byte 0x{value:02x} (at offset {offset} of the file) is not UTF-8, "
                     "the encoding a table's text is read in: the file was saved in another one (Latin-1 or "
                     "Windows-1252 often). "
                     f"Convert it (iconv -f latin1 -t utf-8 {path} > {Path(path).stem}.utf8{Path(path).suffix}, or "
                     f"pandas' read_{'csv' if source.kind == 'csv' else 'json'}(..., encoding='latin1') written "
                     f"again as UTF-8) and point {source.key} at the converted file.")


def bad_json_line(files: Any) -> tuple[Path, int, str] | None:
    """The first line of ``files`` (JSON lines, or a JSON array) that is no JSON object: its file, its line number and
    why (json's own reason); None when every line is one."""
    for path in files:
        if _starts(path, "["):  # one JSON array: json names the line of its first error
            try:
                json.loads(Path(path).read_text(encoding="utf-8", errors="replace"))
            except ValueError as e:
                return path, getattr(e, "lineno", 1), f"not valid JSON ({_reason(e)}; the file is one JSON array)"
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    return path, n, f"not valid JSON ({_reason(e)})"
                if not isinstance(row, dict):
                    return path, n, f"a JSON {type(row).__name__}, not an object with columns"
    return None


def _reason(e: ValueError) -> str:
    """json's reason whole, with its column: its ``msg`` alone stops mid-sentence for some errors ("Unterminated string
    starting at", "Invalid control character at")."""
    msg, column = str(getattr(e, "msg", e)), getattr(e, "colno", None)
    if column is None:
        return msg
    return f"{msg} column {column}" if msg.endswith(" at") else f"{msg} at column {column}"


def json_object_of_rows(source: Source) -> str | None:
    """Why a ``.json`` file that is one JSON object holding the rows (``{"data": [{...}, ...]}``) is not a table of
    them, naming the key that holds them; None for anything else."""
    if source.kind != "json" or len(source.files) != 1:
        return None
    path = source.files[0]
    if not _starts(path, "{"):
        return None
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        return None  # JSON lines, or damaged: named elsewhere
    lists = [k for k, v in value.items() if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)] \
        if isinstance(value, dict) else []
    if not lists:
        return None
    key = lists[0]
    return (f"{source.key}={source.given} is one JSON object, not rows: its key {key!r} holds a list of "
            f"{len(value[key])} objects, which would be read as one row. A table in JSON is an array of objects "
            f"([{{...}}, {{...}}], as Alpaca's file is) or JSON lines (one object a line): write "
            f"json.dump(data[{key!r}], f) (or the rows one a line) and point {source.key} at that file.")


def not_text(data: Any) -> str:
    """What a column that is not text holds: its type, or (JSON lines mixing strings with other values, which
    ``datasets`` stores as JSON) the first row that is no string."""
    if "json" not in str(data.type):
        return str(data.type)
    for i, value in enumerate(data.combine_chunks().storage.to_pylist()):
        decoded = None if value is None else json.loads(value)
        if decoded is not None and not isinstance(decoded, str):
            kind = _KINDS.get(type(decoded).__name__, type(decoded).__name__)
            return f"values of several types (row {i + 1} is {value[:40]}, {kind})"
    return "JSON values"


def row_places(source: Source, rows: list[int]) -> str:
    """Where ``rows`` (ascending, counting from 0 over the files in order) of a table are, for a refusal: ``line 7`` of
    a JSON lines file (``lines 7, 9``), ``line 12, its element 3`` of a JSON array, a CSV's or Parquet file's row, each
    with its file when there are several (``; `` between places); each file read once."""
    places: dict[int, str] = {}
    at = 0
    for path in source.files:
        lines = _json_lines(path) if source.kind == "json" else None
        if lines is None:
            break
        array = _starts(path, "[")
        for row in rows:
            if at <= row < at + len(lines):
                within = f", its element {row - at + 1}" if array else ""
                places[row] = (f"line {lines[row - at]}{within}" if len(source.files) == 1 else
                               f"{path}, line {lines[row - at]}{within}")
        at += len(lines)
    if len(places) < len(rows):  # not JSON: rows as datasets counts them
        return (f"row{'s' if len(rows) > 1 else ''} {', '.join(str(r + 1) for r in rows)} (counting from 1"
                + (", over its files in order)" if len(source.files) > 1 else ")"))
    said = [places[r] for r in rows]
    if len(source.files) == 1 and not any("element" in p for p in said) and len(said) > 1:
        return "lines " + ", ".join(p.removeprefix("line ") for p in said)
    return "; ".join(said)


def _starts(path: Path, char: str) -> bool:
    """Whether the text of ``path`` starts with ``char`` (after whitespace)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read(1 << 16).lstrip().startswith(char)



def _json_lines(path: Path) -> list[int] | None:
    """The line each row of a JSON file starts on: every non-empty line of JSON lines, or where each element of a JSON
    array starts; None when the file is neither."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    if not _starts(path, "["):
        return [n for n, line in enumerate(text.split("\n"), 1) if line.strip()]  # JSON lines end at \n only
    decoder = json.JSONDecoder()
    lines: list[int] = []
    at, counted, line = text.index("[") + 1, 0, 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return lines
        line, counted = line + text.count("\n", counted, at), at
        lines.append(line)
        try:
            _, at = decoder.raw_decode(text, at)
        except ValueError:
            return None
