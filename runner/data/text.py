"""Text for causal language models: UTF-8 bytes, or the ids of a saved tokenizer (the model's, with ``model.path``),
in packed windows or one variable-length sequence per document.

Targets of padded positions are ``IGNORE_INDEX``, so padding never counts in the loss. How far a batch of
documents is padded is the dynamic-shape policy's choice (``pad_to``), set by the builder. Validation never
overlaps training (:mod:`runner.data.splits`): ``val_path``'s files, else a seeded split by document, else the
last windows of a single document.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from runner.config.target_objects import TokenRange
from runner.config.targets import Batching
from runner.data.corpus import describe_missing_text, read_documents, text_bytes
from runner.data.padding import IGNORE_INDEX, LengthGroupedBatchSampler, PadCollate, PadTo
from runner.data.splits import VAL_PATH, split_documents, tail_cut, tail_how
from runner.data.tokenizers import Tokenizer, check_tokenizer, is_bytes, load_tokenizer, token_range
from runner.data.windows import Chunks, PackedWindows, Spans, Stream

__all__ = ["IGNORE_INDEX", "PadCollate", "PadTo", "TextDataModule", "TokenizedTextDataModule"]


def unigram_bits(tokens: np.ndarray) -> float:
    """Entropy of the byte distribution: what a model that ignores context would reach."""
    counts = np.bincount(np.asarray(tokens, dtype=np.int64), minlength=256)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


class Corpus:
    """Documents as token ids: ``tokens`` (flat), ``pieces`` (each document's parts: the whole document, or its
    paragraphs when documents are split at a separator) and ``doc_of`` (the document of each piece)."""

    def __init__(self, docs: list[bytes], tokenizer: Tokenizer, separator: str | None) -> None:
        parts = [d.split(separator.encode()) if separator else [d] for d in docs]
        flat = [p for ps in parts for p in ps]
        if is_bytes(tokenizer.name):
            self.tokens: np.ndarray = np.frombuffer(b"".join(flat), dtype=np.uint8)
            lengths = np.array([len(p) for p in flat], dtype=np.int64)
        else:
            ids = tokenizer([p.decode("utf-8", "replace") for p in flat])
            self.tokens = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)
            lengths = np.array([len(x) for x in ids], dtype=np.int64)
        ends = np.cumsum(lengths)
        self.pieces = Spans(ends - lengths, ends)
        self.doc_of = np.repeat(np.arange(len(parts)), [len(ps) for ps in parts])

    def of(self, docs: list[int]) -> Spans:
        """The pieces of ``docs``, in that order."""
        by_doc = {d: np.flatnonzero(self.doc_of == d) for d in docs}
        return self.pieces.take(np.concatenate([by_doc[d] for d in docs]) if docs else [])


class TextDataModule(L.LightningDataModule):
    """Text from ``path``: every UTF-8 text file under a directory, whatever its name, or one file (default: the
    Python stdlib source), tokenized by ``tokenizer`` (``bytes``/None: UTF-8 bytes; a directory: the tokenizer
    saved there). ``val_path``: files that validate (else a split of ``path``, the same on every run and rank)."""

    def __init__(
        self,
        path: str | None = None,
        val_path: str | None = None,
        tokenizer: str | None = None,
        batching: Batching | str = Batching.packed,
        seq_len: int = 256,
        min_len: int = 16,
        separator: str | None = "\n\n",
        batch_size: int = 16,
        max_bytes: int | None = 4_000_000,
        val_fraction: float = 0.05,
        seed: int = 0,
        num_workers: int = 0,
        length_grouping: int = 0,
        pad_to: PadTo | None = None,
    ) -> None:
        super().__init__()
        self.path, self.val_path, self.tokenizer = path, val_path, tokenizer
        self.seq_len, self.min_len, self.separator = seq_len, min_len, separator
        self.batching = Batching(batching) if isinstance(batching, str) else batching
        self.batch_size, self.max_bytes, self.val_fraction = batch_size, max_bytes, val_fraction
        self.seed, self.num_workers, self.length_grouping = seed, num_workers, length_grouping
        self.pad_to = pad_to or PadTo()
        self.pad_id = 0
        self.unigram_bits: float | None = None
        self.split_how = ""
        self._train: Dataset | None = None
        self._val: Dataset | None = None

    @staticmethod
    def check_arguments(path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                        seq_len: int = 256, batch_size: int = 16, **_: Any) -> str | None:
        """What is wrong with these arguments, in one paragraph, before a run directory exists (None:
        nothing): a tokenizer that is not one, a ``path`` that holds no text, or less than one batch of it,
        a ``val_path`` that is ``path`` itself. A missing path is the config check's to name."""
        if (message := check_tokenizer(tokenizer)) is not None:
            return message
        if val_path is not None and path is not None and Path(val_path).expanduser().resolve() == \
                Path(path).expanduser().resolve():
            return (f"data.val_path={val_path} is data.path itself: validation would be the training data. Give "
                    "files that are not under data.path, or drop data.val_path to validate on a split of data.path.")
        for key, where in (("data.path", path), ("data.val_path", val_path)):
            if where is None or not Path(where).expanduser().exists():
                continue
            need = seq_len * batch_size + 1 if key == "data.path" else seq_len + 1
            have = text_bytes(where, enough=need)
            if have == 0:
                return describe_missing_text(where).replace("data.path", key, 1)
            if have < need:
                return (f"{key}={where} holds {have} bytes of text, less than one batch takes (data.batch_size="
                        f"{batch_size} x data.seq_len={seq_len} = {need - 1} bytes), so training would have no "
                        f"batch. Point {key} at more text, or lower data.seq_len or data.batch_size.")
        return None

    @staticmethod
    def token_range(tokenizer: str | None = None, **_: Any) -> TokenRange | None:
        """The ids this data gives the model (the vocabulary check compares them with the model's embedding)."""
        return token_range(tokenizer, offset=0)

    def check(self) -> None:
        """Fail fast (before any model is built) if the data cannot be read."""
        read_documents(self.path, max_bytes=1)

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        tokenizer = load_tokenizer(self.tokenizer)
        self.pad_id = tokenizer.pad_id
        docs = read_documents(self.path, self.max_bytes)
        val_docs = read_documents(self.val_path, self.max_bytes) if self.val_path else []
        separator = self.separator if self.batching is Batching.documents else None
        corpus = Corpus(docs + val_docs, tokenizer, separator)
        self._train_docs: list[int] | None = None
        self._train, self._val = self._split(corpus, len(docs), len(val_docs))
        if is_bytes(tokenizer.name):  # over the training documents, or the training part of the one document
            train = self._train.stream if isinstance(self._train, PackedWindows) else self._train
            self.unigram_bits = unigram_bits(_ids(train) if self._train_docs is None else
                                             np.frombuffer(b"".join(docs[i] for i in self._train_docs), np.uint8))
        if len(self._train) == 0 or len(self._val) == 0:  # type: ignore[arg-type]
            which = "training" if len(self._train) == 0 else "validation"  # type: ignore[arg-type]
            raise ValueError(
                f"data: no {which} sequences of seq_len={self.seq_len} in {len(docs)} documents "
                f"({self.split_how}); lower data.seq_len, raise data.max_bytes or give more text.")

    def _split(self, corpus: Corpus, n_train: int, n_val: int) -> tuple[Dataset, Dataset]:
        """Training and validation sequences, disjoint (module docstring)."""
        if n_val:
            self.split_how, self._train_docs = VAL_PATH, list(range(n_train))
            return self._sequences(corpus, corpus.of(list(range(n_train)))), \
                self._sequences(corpus, corpus.of(list(range(n_train, n_train + n_val))))
        if n_train >= 2:
            split = split_documents(n_train, self.val_fraction, self.seed)
            self.split_how, self._train_docs = split.how, split.train
            return self._sequences(corpus, corpus.of(split.train)), self._sequences(corpus, corpus.of(split.val))
        self.split_how = tail_how(self.val_fraction)
        pieces = corpus.of([0])
        if self.batching is Batching.packed:  # the last windows (seq_len + 1 ids each) validate
            n = int(pieces.lengths.sum())
            cut = tail_cut(n - 1, self.seq_len, self.val_fraction)
            cut = 0 if cut is None else cut
            stream = Stream(corpus.tokens, pieces)
            return (PackedWindows(_sub(stream, 0, cut), self.seq_len),
                    PackedWindows(_sub(stream, cut, n), self.seq_len))
        chunks = pieces.chunked(self.seq_len + 1, self.min_len)  # the last chunks validate
        cut = tail_cut(len(chunks), 1, self.val_fraction) or 0
        order = np.arange(len(chunks))
        return Chunks(corpus.tokens, chunks.take(order[:cut])), Chunks(corpus.tokens, chunks.take(order[cut:]))

    def _sequences(self, corpus: Corpus, spans: Spans) -> Dataset:
        if self.batching is Batching.packed:
            return PackedWindows(Stream(corpus.tokens, spans), self.seq_len)
        return Chunks(corpus.tokens, spans.chunked(self.seq_len + 1, self.min_len))

    def _loader(self, ds: Dataset | None, shuffle: bool) -> DataLoader:
        assert ds is not None, "setup() first"
        collate = PadCollate(self.pad_to, self.pad_id) if self.batching is Batching.documents else None
        g = torch.Generator().manual_seed(self.seed)
        common: dict[str, Any] = dict(collate_fn=collate, generator=g, num_workers=self.num_workers,
                                      persistent_workers=self.num_workers > 0)
        if shuffle and self.length_grouping and isinstance(ds, Chunks):
            # The loader's generator drives the RandomSampler, so resuming restores the order.
            sampler = LengthGroupedBatchSampler(RandomSampler(ds, generator=g), self.batch_size, drop_last=True,
                                                lengths=ds.lengths, window=self.length_grouping)
            return DataLoader(ds, batch_sampler=sampler, **common)
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, drop_last=shuffle, **common)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._val, shuffle=False)


class TokenizedTextDataModule(TextDataModule):
    """``data=tokenized_text``: ``TextDataModule`` whose tokenizer must be a saved one (never bytes)."""

    @staticmethod
    def check_arguments(path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                        seq_len: int = 256, batch_size: int = 16, **kwargs: Any) -> str | None:
        """An empty tokenizer (no model.path to default to) is refused; the rest is ``TextDataModule``'s check."""
        if is_bytes(tokenizer):
            return ("data.tokenizer is empty: give the directory a tokenizer was saved to (usually the model's "
                    "model.path), or use data=text (UTF-8 bytes) with a model built from its configuration.")
        return TextDataModule.check_arguments(path, val_path, tokenizer, seq_len, batch_size, **kwargs)


def _sub(stream: Stream, a: int, b: int) -> Stream:
    """Ids ``[a, b)`` of a single-span stream, as a stream."""
    start = int(stream.spans.starts[0])
    return Stream(stream.tokens, Spans([start + a], [start + b]))


def _ids(data: Stream | Dataset) -> np.ndarray:
    """Every id of a stream, or of a set of chunks."""
    if isinstance(data, Stream):
        return data.read(0, len(data))
    assert isinstance(data, Chunks)
    return np.concatenate([data.tokens[int(a):int(b)] for a, b in zip(data.spans.starts, data.spans.ends,
                                                                        strict=True)] or [np.zeros(0, np.uint8)])
