"""What is wrong with a table, in the words of the paragraph that refuses it: an empty or damaged file, the line of a
JSON lines file that is no JSON object (its file and line number, json's own reason), a byte that is not UTF-8 (its
file, line and offset), a text column that holds something else than text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.data.reading.sources import DataError, Source

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
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.read(1 << 16).lstrip()
        if first.startswith("["):  # one JSON array: json names the line of its first error
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
    with open(path, encoding="utf-8", errors="replace") as f:
        if not f.read(1 << 16).lstrip().startswith("{"):
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


def row_place(source: Source, row: int) -> str:
    """Where row ``row`` (counting from 0, over the files in order) of a table is, for a refusal: ``line 7`` of a JSON
    lines file, ``line 12, its element 3`` of a JSON array, a CSV's or Parquet file's row, each with its file when there
    are several."""
    return row_places(source, [row])


def row_places(source: Source, rows: list[int]) -> str:
    """Where ``rows`` (ascending, counting from 0 over the files in order) of a table are, as ``row_place`` says one:
    ``lines 7, 9`` of one JSON lines file, each row's place (``; ``) otherwise; each file read once."""
    places: dict[int, str] = {}
    at = 0
    for path in source.files:
        lines = _json_lines(path) if source.kind == "json" else None
        if lines is None:
            break
        array = _is_array(path)
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


def _is_array(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read(1 << 16).lstrip().startswith("[")


def _json_lines(path: Path) -> list[int] | None:
    """The line each row of a JSON file starts on: every non-empty line of JSON lines, or where each element of a JSON
    array starts; None when the file is neither."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    if not _is_array(path):
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
