"""Token ids of text for the causal LM and the classifier, in a store."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runner.data.reading.sources import prepared_store
from runner.data.reading.tables import cell_text
from runner.data.store import digest_files, store_dir, store_key
from runner.data.store.arrays import Store, StoreWriter, token_dtype
from runner.data.store.parallel import Chunk, encode_table, store_batches, table_batches
from runner.data.store.shared import progress_file
from runner.data.tokens.tokenizers import Tokenizer, is_bytes, load_tokenizer, tokenizer_stamp

log = logging.getLogger(__name__)

IDS = "ids"
LENGTH = "length"
DOC = "doc"
SEGMENT = 1 << 16  # Characters of text a tokenizer is given at a time (``tokenize_long``)
RAW_BYTES = "bytes"  # The ragged column of raw bytes ``load_text_files`` writes: byte ids as they are
VERSION = 1


def rows_stamp(rows: Any) -> Any:
    """What identifies ``rows``' content: the digest of their Arrow files' bytes (a touched but unchanged file's are the
    same) and their count; rows held in memory, ``datasets``' fingerprint of them."""
    from pathlib import Path

    files = [Path(f["filename"]) for f in rows.cache_files]
    return [digest_files(files), len(rows)] if files else ["in memory", rows._fingerprint, len(rows)]


_TOKENIZERS: dict[str, Tokenizer] = {}  # This process's tokenizers, by their directory: loaded once per worker


@dataclass(frozen=True)
class TextEncoder:
    """Texts of ``column`` (strings, or bytes: a text file's pieces) -> their ids; ``keep``: row columns stored as they
    are (a piece's document)."""

    column: str
    tokenizer: str | None
    suffix: str = ""
    max_len: int | None = None
    keep: tuple[str, ...] = field(default_factory=tuple)

    def __call__(self, batch: Any) -> Chunk:
        texts = batch.column(self.column).to_pylist()
        rows = {name: np.asarray(batch.column(name).to_numpy()) for name in self.keep}
        if self.tokenizer is None:
            suffix = self.suffix.encode("utf-8")
            data = [(t if isinstance(t, bytes) else cell_text(t).encode("utf-8")) + suffix for t in texts]
            lengths = np.fromiter(map(len, data), dtype=np.int64, count=len(data))
            return Chunk({IDS: (np.frombuffer(b"".join(data), dtype=np.uint8), lengths)}, rows)
        if self.tokenizer not in _TOKENIZERS:
            _TOKENIZERS[self.tokenizer] = load_tokenizer(self.tokenizer)
        tokenizer = _TOKENIZERS[self.tokenizer]
        strings = [cell_text(t) + self.suffix for t in texts]
        ids = tokenizer(strings) if self.max_len is not None else [tokenize_long(tokenizer, s) for s in strings]
        full = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        long = [i for i, x in enumerate(ids) if self.max_len is not None and len(x) > self.max_len]
        for i, cut in zip(long, tokenizer([strings[i] for i in long], self.max_len) if long else [], strict=True):
            ids[i] = cut
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.concatenate(ids) if ids else np.zeros(0, np.int32)
        if self.max_len is not None:
            rows[LENGTH] = full
        return Chunk({IDS: (flat, lengths)}, rows)


def encode(rows: Any, column: str, tokenizer: Tokenizer, *, suffix: str = "", max_len: int | None = None,
           select: np.ndarray | None = None, keep: tuple[str, ...] = (), what: str = "") -> Store:
    """The store of ``rows``' ids of ``column`` (plus ``suffix``): the rows at ``select`` (ascending indices; None:
    all), a ragged ``ids`` column and the ``keep`` columns."""
    if isinstance(rows, Store):
        content: Any = ["store", rows.directory.name]
        total = rows.rows
    else:
        content = [rows_stamp(rows), None if select is None else hashlib.sha256(np.asarray(select, np.int64)
                                                                               .tobytes()).hexdigest()]
        total = len(rows) if select is None else len(select)
    spec = None if is_bytes(tokenizer.name) else tokenizer.name
    encoder = TextEncoder(column, spec, suffix, max_len if spec is not None else None, keep)
    directory = store_dir(store_key("tokens", content, column, tokenizer_stamp(tokenizer), suffix, encoder.max_len,
                                    keep, VERSION))

    def build(tmp: Any) -> None:
        largest = 255 if spec is None else tokenizer.vocab_size - 1
        row_columns = {name: "int32" for name in keep}
        if encoder.max_len is not None:
            row_columns[LENGTH] = "int64"
        writer = StoreWriter(tmp, ragged={IDS: token_dtype(largest)}, rows=row_columns)
        batches = store_batches(rows, column, keep) if isinstance(rows, Store) else \
            table_batches(rows, [column, *keep], select=select)
        done = encode_table(writer, batches, encoder, total, f"tokenizing {what or column}", progress_file(directory))
        writer.finish({"seconds": round(done.seconds, 2)})

    store, built = prepared_store(directory, build, what or column)
    if built:
        log.info("data: tokenized %d rows of %s with %s in %.1f s; stored in %s", store.rows, what or column,
                 tokenizer.name, store.meta["seconds"], directory)
    else:
        log.info("data: token ids of %s read from the cache (%s): not tokenized again", what or column, directory)
    return store


def tokenize_long(tokenizer: Tokenizer, text: str) -> np.ndarray:
    """The ids of one text of any length, ``SEGMENT`` characters (cut after a newline) at a time: a tokenizer's working
    memory is many times its text's size, so a piece of megabytes is never tokenized at once."""
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
