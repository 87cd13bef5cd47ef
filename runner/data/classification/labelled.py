"""Labelled rows for a classifier: a table (columns ``data.text_column`` and ``data.label_column``), text files of
``label<TAB>text`` lines (or JSON objects), or by default the stdlib task (which package a paragraph comes from)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runner.data.classification.labels import label_values
from runner.data.reading.corpus import read_documents, stdlib_dir
from runner.data.reading.sources import DataError, Source, resolve
from runner.data.reading.tables import check_column, in_memory_rows, load_table, null_rows, text_lengths
from runner.data.summary import NULL_TEXT

# The default task: which of these stdlib packages a paragraph of source comes from.
STDLIB_PACKAGES = ("asyncio", "email", "unittest", "xml")


@dataclass
class Labelled:
    """One setting's rows: ``keep`` (the rows used, by index), each distinct label's count, what was left out."""

    rows: Any
    source: str
    files: int
    keep: np.ndarray
    values: dict[Any, int]
    dropped: dict[str, int] = field(default_factory=dict)
    given: str | None = None  # What the setting named (the path given; a DatasetDict's own validation split's folder)


def stdlib_examples(max_examples: int | None, min_len: int) -> tuple[list[str], list[str]]:
    """Paragraphs of four stdlib packages (at least ``min_len`` bytes), at most ``max_examples`` split evenly, and the
    package of each."""
    per_class = None if max_examples is None else max(1, max_examples // len(STDLIB_PACKAGES))
    texts: list[str] = []
    labels: list[str] = []
    for package in STDLIB_PACKAGES:
        docs = read_documents(stdlib_dir() / package, max_bytes=None)
        paragraphs = [p for d in docs for p in d.split(b"\n\n") if len(p.strip()) >= min_len]
        random.Random(package).shuffle(paragraphs)
        texts += [p.decode("utf-8", "replace") for p in paragraphs[:per_class]]
        labels += [package] * len(paragraphs[:per_class])
    return texts, labels


def labelled_lines(source: Source, text_column: str, label_column: str) -> Any:
    """Text files of ``label<TAB>text`` lines, or JSON objects with the two columns, as rows held in memory."""

    texts: list[str | None] = []
    labels: list[Any] = []
    for path in source.files:
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            if line.lstrip().startswith("{"):
                try:
                    row = json.loads(line)
                    text, label = row[text_column], row[label_column]
                except (ValueError, KeyError, TypeError) as e:
                    raise DataError(f"{source.key}={path}, line {n}: not a JSON object with {text_column} and "
                                    f"{label_column} ({type(e).__name__}: {e}). Each line is a JSON object with the "
                                    "text and the label, or label<TAB>text; a table reads as .jsonl, .csv or "
                                    ".parquet.") from e
                if text is not None and not isinstance(text, str):
                    raise DataError(f"{source.key}={path}, line {n}: its {text_column} is {json.dumps(text)[:40]}, "
                                    "not a string. Give every text as a string (a missing one as null: it is left "
                                    "out and counted).")
                texts.append(text)
                labels.append(label)
                continue
            label, sep, text = line.partition("\t")
            if not sep:
                raise DataError(f"{source.key}={path}, line {n}: neither JSON nor label<TAB>text. Each line is a "
                                "JSON object with the text and the label, or label<TAB>text; a table reads as "
                                ".jsonl, .csv or .parquet.")
            texts.append(text)
            labels.append(label)
    if len({type(v) for v in labels}) > 1:  # JSON lines with 1 and "cat": one Arrow column cannot hold both
        labels = [json.dumps(v) if not isinstance(v, str) else v for v in labels]
    return in_memory_rows({text_column: texts, label_column: labels})


def read_labelled(path: str | None, key: str, text_column: str, label_column: str, max_examples: int | None,
                  min_len: int) -> Labelled:
    """The labelled rows ``path`` names; ``DataError`` when they cannot be used."""
    if path is None:
        texts, labels = stdlib_examples(max_examples, min_len)
        rows = in_memory_rows({text_column: texts, label_column: labels})
        source, files, described = Source(key, "stdlib", "text", ()), len(STDLIB_PACKAGES), "the Python stdlib task"
    else:
        source = resolve(path, key)
        rows = load_table(source)[0] if source.is_table else labelled_lines(source, text_column, label_column)
        files, described = len(source.files), source.describe()
    if len(rows) == 0:
        raise DataError(f"{key}={path} holds no rows. Point {key} at a file with labelled rows in it.")
    check_column(rows, label_column, "data.label_column", source)
    lengths = text_lengths(rows, text_column, source, "data.text_column")
    null = null_rows(rows, text_column)
    dropped: dict[str, int] = {}
    if max_examples is not None and len(rows) > max_examples:
        dropped[f"data.max_examples={max_examples}"] = len(rows) - max_examples
        rows, lengths, null = rows.select(range(max_examples)), lengths[:max_examples], null[:max_examples]
    if null.any():
        dropped[NULL_TEXT] = int(null.sum())
    keep = np.flatnonzero((lengths >= max(min_len, 1)) & ~null)
    if len(keep) + int(null.sum()) < len(rows):
        dropped[f"data.min_len={min_len}"] = len(rows) - len(keep) - int(null.sum())
    values = label_values(rows, label_column, source)
    return Labelled(rows, described, files, keep, values, dropped, path)
