"""Token ids for rows of a ``datasets.Dataset``: a cached batched ``map``, and a flat view of its ids.

``encode`` tokenizes one text column once: the ids go to a cache file named after the rows' content (the digest of
their Arrow files), the column, the tokenizer's files' contents and the settings, so a second run on the same data
reads them back instead of tokenizing again (and says so in its log). Bytes are stored as bytes (an Arrow binary
column: one byte per id); a tokenizer's ids as ``int32`` lists, with each text's full length beside them.
A ``bytes`` column (text files, :func:`runner.data.tables.load_text_files`) already is byte ids.

``ArrowTokens`` reads such a column as one flat sequence of ids, straight from the memory-mapped Arrow buffers:
nothing is copied until a window is read, and a data loader's workers open the same files (they pickle the
``datasets.Dataset``, which pickles as its file names).
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from runner.data.store import digest_files
from runner.data.tables import cache_root, fingerprint, quiet_datasets
from runner.data.tokenizers import Tokenizer, is_bytes, tokenizer_stamp
from runner.data.windows import Spans

log = logging.getLogger(__name__)

IDS = "ids"
LENGTH = "length"
SEGMENT = 1 << 16
"""Characters of text a tokenizer is given at a time (``tokenize_long``)."""
RAW_BYTES = "bytes"
"""The column of raw bytes ``load_text_files`` writes: byte ids as they are."""


def rows_stamp(rows: Any) -> Any:
    """What identifies ``rows``' content: the digest of their Arrow files' bytes (a table prepared again from a file
    touched but unchanged is the same bytes) and their count (a capped selection is a prefix); None for rows held in
    memory (nothing to name a cache after)."""
    files = [Path(f["filename"]) for f in rows.cache_files]
    return [digest_files(files), len(rows)] if files else None


def encode(rows: Any, column: str, tokenizer: Tokenizer, *, suffix: str = "", max_len: int | None = None,
           keep: tuple[str, ...] = (), what: str = "") -> tuple[Any, str]:
    """``rows`` with the ids of ``column`` (plus ``suffix``): the dataset and the name of its ids column. A saved
    tokenizer's ids are cut at ``max_len`` (its special tokens kept), ``length`` holding each full length; byte ids
    are cut when read. Columns other than ``keep`` are left out."""
    if is_bytes(tokenizer.name) and column == RAW_BYTES and not suffix:
        return rows, RAW_BYTES
    import datasets

    if is_bytes(tokenizer.name):
        features = datasets.Features({IDS: datasets.Value("binary")})

        def fn(texts: list[Any]) -> dict[str, list[Any]]:
            return {IDS: [_text(t).encode("utf-8") + suffix.encode("utf-8") for t in texts]}
    else:
        features = datasets.Features({IDS: datasets.List(datasets.Value("int32")), LENGTH: datasets.Value("int32")})

        def fn(texts: list[Any]) -> dict[str, list[Any]]:
            strings = [_text(t) + suffix for t in texts]
            ids = tokenizer(strings) if max_len is not None else [tokenize_long(tokenizer, s) for s in strings]
            long = [i for i, x in enumerate(ids) if max_len is not None and len(x) > max_len]
            lengths = [len(x) for x in ids]
            for i, cut in zip(long, tokenizer([strings[i] for i in long], max_len) if long else [], strict=True):
                ids[i] = cut
            return {IDS: ids, LENGTH: lengths}

    for kept in keep:
        features[kept] = rows.features[kept]
    stamp = rows_stamp(rows)
    key = fingerprint(stamp, column, tokenizer_stamp(tokenizer), suffix, max_len, keep, 2)
    name: str | None = None if stamp is None else str(cache_root() / f"tokens-{key}.arrow")
    cached = name is not None and Path(name).exists()
    start = time.perf_counter()
    # Pieces of text files are megabytes each: one at a time, so a tokenizer's working memory stays small.
    batch = 1 if column == RAW_BYTES else 1000
    with quiet_datasets():
        out = rows.map(fn, batched=True, batch_size=batch, writer_batch_size=batch, input_columns=[column],
                       features=features, cache_file_name=name,
                       keep_in_memory=name is None, new_fingerprint=None if name is None else Path(name).stem,
                       remove_columns=[c for c in rows.column_names if c not in keep], load_from_cache_file=True)
    if cached:
        log.info("data: token ids of %s read from the cache (%s): not tokenized again", what or column, name)
    elif name is not None:
        log.info("data: tokenized %d rows of %s with %s in %.1f s; cached at %s", len(rows), what or column,
                 tokenizer.name, time.perf_counter() - start, name)
    return out, IDS


def tokenize_long(tokenizer: Tokenizer, text: str) -> np.ndarray:
    """The ids of one text of any length, ``SEGMENT`` characters (cut after a newline) at a time: a tokenizer's
    working memory is many times its text's size, so a piece of megabytes is never tokenized at once. The special
    tokens are added once, to the first segment."""
    if len(text) <= SEGMENT:
        return tokenizer([text])[0]
    segments, start = [], 0
    while start < len(text):
        stop = len(text) if len(text) - start <= SEGMENT else text.rfind("\n", start, start + SEGMENT) + 1
        stop = stop if stop > start else start + SEGMENT
        segments.append(text[start:stop])
        start = stop
    ids = tokenizer(segments[:1])
    for i in range(1, len(segments), 16):
        ids += tokenizer(segments[i:i + 16], special=False)
    return np.concatenate(ids)


def _text(value: Any) -> str:
    """A cell of a text column as text (bytes decoded, a missing value empty)."""
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class ArrowTokens:
    """The ids in ``column`` of ``rows`` (binary: one byte per id; or lists of ids) as one flat sequence, plus
    ``offset`` (a family's byte ids start at 1). ``spans``: where each row's ids start and end in it."""

    def __init__(self, rows: Any, column: str, offset: int = 0) -> None:
        self.rows, self.column, self.offset = rows, column, offset
        self._values: list[np.ndarray] | None = None
        self._starts = np.zeros(1, dtype=np.int64)
        self.spans = Spans([], [])

    def __getstate__(self) -> dict[str, Any]:  # a worker maps the files again instead of receiving copies
        return {**self.__dict__, "_values": None}

    def _load(self) -> list[np.ndarray]:
        if self._values is not None:
            return self._values
        values, row_starts, row_ends, bases = [], [], [], [0]
        for chunk in self.rows.data.column(self.column).chunks:
            if chunk.type.id in _binary():
                wide = chunk.type.id == _binary()[1]
                offsets = np.frombuffer(chunk.buffers()[1], np.int64 if wide else np.int32)[
                    chunk.offset:chunk.offset + len(chunk) + 1].astype(np.int64)
                flat = np.frombuffer(chunk.buffers()[2], np.uint8) if chunk.buffers()[2] else np.zeros(0, np.uint8)
            else:
                offsets = chunk.offsets.to_numpy().astype(np.int64)
                flat = chunk.values.to_numpy(zero_copy_only=False)
            values.append(flat[offsets[0]:offsets[-1]])
            row_starts.append(offsets[:-1] - offsets[0] + bases[-1])
            row_ends.append(offsets[1:] - offsets[0] + bases[-1])
            bases.append(bases[-1] + int(offsets[-1] - offsets[0]))
        self._starts = np.asarray(bases, dtype=np.int64)
        self.spans = Spans(np.concatenate(row_starts) if row_starts else [],
                           np.concatenate(row_ends) if row_ends else [])
        self._values = values
        return values

    def __len__(self) -> int:
        self._load()
        return int(self._starts[-1])

    def __getitem__(self, index: slice) -> np.ndarray:
        values = self._load()
        a, b = index.start or 0, index.stop
        i = int(np.searchsorted(self._starts, a, side="right")) - 1
        parts = []
        while a < b:
            stop = min(b, int(self._starts[i + 1]))
            parts.append(values[i][a - int(self._starts[i]):stop - int(self._starts[i])])
            a, i = stop, i + 1
        ids = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, np.int32)
        return ids.astype(np.int64) + self.offset if self.offset else ids


@functools.cache
def _binary() -> tuple[int, int]:
    """pyarrow's type ids of binary and large binary (imported when ids are first read)."""
    import pyarrow as pa

    return pa.binary().id, pa.large_binary().id
