"""A language-modelling corpus as token ids: every document's pieces, where they lie in one flat sequence of ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runner.data.reading.corpus import read_documents, stdlib_dir, text_files
from runner.data.reading.sources import Source, capped, resolve
from runner.data.reading.tables import load_table, null_rows, text_lengths
from runner.data.reading.text_files import load_text_files
from runner.data.sequences.windows import Spans, Tokens
from runner.data.store.arrays import Store
from runner.data.summary import NULL_TEXT
from runner.data.tokens.encoding import DOC, IDS, RAW_BYTES, encode
from runner.data.tokens.tokenizers import Tokenizer, is_bytes


@dataclass
class Read:
    """What reading a corpus found, for the data section: its files and documents, and what a cap left out."""

    key: str
    source: str
    files: int
    documents: int
    # Cap setting (``data.max_bytes=4000000``) -> files or rows it left out
    dropped: dict[str, int] = field(default_factory=dict)


class Corpus:
    """``tokens`` (flat ids), ``pieces`` (their spans) and ``doc_of`` (each piece's document, ascending)."""

    def __init__(self, tokens: Tokens, pieces: Spans, doc_of: np.ndarray, read: Read,
                 raw: list[bytes] | None = None) -> None:
        self.tokens, self.pieces, self.doc_of, self.read = tokens, pieces, np.asarray(doc_of, np.int64), read
        # The documents' bytes, when held in memory (the stdlib corpus: its byte entropy is counted on them)
        self.raw = raw

    @property
    def n_docs(self) -> int:
        return int(self.doc_of[-1]) + 1 if len(self.doc_of) else 0

    def of(self, docs: Any) -> Spans:
        """The pieces of ``docs``, document by document in that order."""
        docs = np.asarray(docs, dtype=np.int64)
        lo = np.searchsorted(self.doc_of, docs, side="left")
        counts = np.searchsorted(self.doc_of, docs, side="right") - lo
        index = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        return self.pieces.take(index)


def from_bytes(docs: list[bytes], tokenizer: Tokenizer, separator: str | None, read: Read) -> Corpus:
    """Documents held in memory as bytes, split at ``separator`` when given, as ids of ``tokenizer``."""
    parts = [d.split(separator.encode()) if separator else [d] for d in docs]
    flat = [p for ps in parts for p in ps]
    if is_bytes(tokenizer.name):
        tokens: np.ndarray = np.frombuffer(b"".join(flat), dtype=np.uint8)
        lengths = np.array([len(p) for p in flat], dtype=np.int64)
    else:
        ids = tokenizer([p.decode("utf-8", "replace") for p in flat])
        tokens = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)
        lengths = np.array([len(x) for x in ids], dtype=np.int64)
    ends = np.cumsum(lengths)
    doc_of = np.repeat(np.arange(len(parts)), [len(ps) for ps in parts])
    return Corpus(tokens, Spans(ends - lengths, ends), doc_of, read, raw=docs)


def from_store(store: Store, column: str, doc_column: str | None, read: Read) -> Corpus:
    """A store holding ids in ``column`` (one piece a row), the document of each in ``doc_column`` (else one per row):
    the ids stay in their memory-mapped file."""
    ids = store.ragged(column)
    starts, ends = ids.bounds()
    doc_of = np.asarray(store.column(doc_column)[:]) if doc_column else np.arange(store.rows)
    return Corpus(ids.values, Spans(starts, ends), doc_of, read)


def read_corpus(path: str | None, key: str, tokenizer: Tokenizer, *, text_column: str, separator: str | None,
                packed: bool, max_bytes: int | None) -> Corpus:
    """The corpus ``path`` names."""
    cap = f"data.max_bytes={max_bytes}"
    if path is None:
        docs = read_documents(None, max_bytes)
        every = sum(1 for _ in text_files(stdlib_dir()))
        read = Read(key, "the Python stdlib source", len(docs), len(docs), {cap: every - len(docs)} if every > len(docs)
                    else {})
        return from_bytes(docs, tokenizer, None if packed else separator, read)
    source = resolve(path, key)
    if not source.is_table:
        files, left_out = capped(source.files, max_bytes)
        kept = Source(source.key, source.given, source.kind, files)
        pieces = load_text_files(kept, None if packed or not separator else separator.encode())
        read = Read(key, source.describe(), len(files), len(files), {cap: left_out} if left_out else {})
        if is_bytes(tokenizer.name):  # the pieces' bytes are the ids
            return from_store(pieces, RAW_BYTES, DOC, read)
        return from_store(encode(pieces, RAW_BYTES, tokenizer, keep=(DOC,), what=f"{key}={path}"), IDS, DOC, read)
    return _table_corpus(source, tokenizer, text_column, separator if packed and separator else "", max_bytes)


def _table_corpus(source: Source, tokenizer: Tokenizer, text_column: str, suffix: str,
                  max_bytes: int | None) -> Corpus:
    """The text column of a table's rows, each row a document (a null text none), the first rows whose text reaches
    ``max_bytes``."""
    rows, _ = load_table(source)
    lengths = text_lengths(rows, text_column, source, "data.text_column")
    null = null_rows(rows, text_column)
    dropped: dict[str, int] = {}
    chosen = np.flatnonzero(~null)
    if null.any():  # a missing text is no document (not an empty one): left out, and counted
        dropped[NULL_TEXT] = int(null.sum())
        lengths = lengths[~null]
    keep = len(chosen)
    if max_bytes is not None and len(lengths) and lengths.sum() > max_bytes:
        keep = int(np.searchsorted(np.cumsum(lengths), max_bytes)) + 1
    if keep < len(lengths):
        dropped[f"data.max_bytes={max_bytes}"] = len(lengths) - keep
    encoded = encode(rows, text_column, tokenizer, suffix=suffix, select=chosen[:keep],
                     what=f"{source.key}={source.given}")
    return from_store(encoded, IDS, None, Read(source.key, source.describe(), len(source.files), keep, dropped))
