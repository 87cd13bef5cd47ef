"""Text for causal language models (UTF-8 bytes or a saved tokenizer's ids), in packed windows or one sequence per
document, from the Python stdlib source, text files, or a table's text column."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from runner.config.schema.data import Batching
from runner.config.target_objects import TokenRange
from runner.data.reading.corpus import describe_missing_text
from runner.data.reading.sources import DataError, capped, names_something, own_validation, resolve, val_path_refusal
from runner.data.reading.tables import load_table, text_lengths
from runner.data.sequences.packed import Examples, Packs, pack_collate
from runner.data.sequences.padding import LengthGroupedBatchSampler, PadCollate, PadTo
from runner.data.sequences.windows import Chunks, PackedWindows, Spans, Stream
from runner.data.splits import split_documents, tail_cut, val_how
from runner.data.store import remembered, store_key
from runner.data.store.arrays import Mapped, spans_blocks
from runner.data.summary import DataSummary, SplitData
from runner.data.text.documents import Corpus, read_corpus
from runner.data.tokens.tokenizers import check_tokenizer, is_bytes, load_tokenizer, token_range
from runner.data.traits import DataTraits, ValMetric


def unigram_bits(parts: Iterable[np.ndarray]) -> float:
    """Entropy of the byte distribution: what a model that ignores context would reach."""
    counts = np.zeros(256, dtype=np.int64)
    for part in parts:
        counts += np.bincount(part, minlength=256)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


class TextDataModule(SplitData):
    """Text from ``path`` (a file, a folder or a glob of text files or tables; default: the Python stdlib source),
    tokenized by ``tokenizer`` (``bytes``/None: UTF-8 bytes; a directory: the tokenizer saved there); a table's
    ``text_column``."""

    def __init__(
        self,
        path: str | None = None,
        val_path: str | None = None,
        tokenizer: str | None = None,
        text_column: str = "text",
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
        packing: bool = False,
        pad_to: PadTo | None = None,
    ) -> None:
        super().__init__()
        self.path, self.val_path, self.tokenizer, self.text_column = path, val_path, tokenizer, text_column
        self.seq_len, self.min_len, self.separator = seq_len, min_len, separator
        self.batching = Batching(batching) if isinstance(batching, str) else batching
        self.batch_size, self.max_bytes, self.val_fraction = batch_size, max_bytes, val_fraction
        self.seed, self.num_workers, self.length_grouping = seed, num_workers, length_grouping
        self.packing = packing
        self._packing: dict[str, Any] = {}
        self.pad_to = pad_to or PadTo()
        self.pad_id = 0
        self.unigram_bits: float | None = None
        self._train: Dataset | None = None
        self._val: Dataset | None = None
        self._own_val: str | None = None

    @staticmethod
    def check_arguments(path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                        text_column: str = "text", seq_len: int = 256, batch_size: int = 16,
                        batching: Batching | str = Batching.packed, packing: bool = False,
                        **_: Any) -> str | None:
        """What is wrong with these arguments, in one paragraph, before a run directory exists (None: nothing)."""
        if (message := check_tokenizer(tokenizer)) is not None:
            return message
        if packing and Batching(batching) is Batching.packed:
            return ("data.packing=true packs documents into rows, but data.batching=packed reads fixed windows "
                    "that run across documents (attention crossing them). Set data.batching=documents "
                    "(data=text_documents data.packing=true), or drop data.packing.")
        if (refusal := val_path_refusal(path, val_path, give="files that are not under data.path")) is not None:
            return refusal
        val_path = val_path or own_validation(path)
        for key, where in (("data.path", path), ("data.val_path", val_path)):
            if where is None or not names_something(where):
                continue
            need = seq_len * batch_size + 1 if key == "data.path" else seq_len + 1
            try:
                have = _text_bytes(where, key, text_column, need)
            except DataError as e:
                return str(e)
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

    @staticmethod
    def traits(tokenizer: str | None = None, batching: Batching | str = Batching.packed, packing: bool = False,
               **_: Any) -> DataTraits:
        """Bits per byte on bytes (none on a tokenizer's ids); documents are padded per batch and vary in shape, unless
        packed into rows of one length."""
        varies = Batching(batching) is Batching.documents and not packing
        metric = ValMetric.bits_per_byte if is_bytes(tokenizer) else ValMetric.none
        return DataTraits(metric, pads_per_batch=varies, shapes_vary=varies)

    def own_figures(self) -> dict[str, Any]:
        return self._packing

    def check(self) -> None:
        """Fail fast (before any model is built) if the data cannot be read."""
        for key, where in (("data.path", self.path), ("data.val_path", self.val_path)):
            if where is not None:
                resolve(where, key)

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        tokenizer = load_tokenizer(self.tokenizer)
        self.pad_id = tokenizer.pad_id
        packed = self.batching is Batching.packed
        self._own_val = None if self.val_path else own_validation(self.path)
        read = {key: read_corpus(where, key, tokenizer, text_column=self.text_column, separator=self.separator,
                                 packed=packed, max_bytes=self.max_bytes)
                for key, where in (("data.path", self.path), ("data.val_path", self.val_path or self._own_val))
                if where is not None or key == "data.path"}
        train, val = read["data.path"], read.get("data.val_path")
        self._train_docs: list[int] | None = None
        self._train, self._val = self._split(train, val)
        if is_bytes(tokenizer.name):  # over the training documents, or the training part of the one document
            self.unigram_bits = self._unigram(train)
        if self.packing:  # documents batching (checked): the chunks, packed into rows of seq_len
            train_packs, val_packs = (Packs(Examples(ds.tokens, ds.spans), self.seq_len, self.pad_id)
                                      for ds in (self._train, self._val) if isinstance(ds, Chunks))
            self._train, self._val = train_packs, val_packs
            self._packing = train_packs.figures(self.batch_size)
        self.summary = summarize(list(read.values()), len(self._train), len(self._val),  # type: ignore[arg-type]
                                 self.split_how, self.unigram_bits)
        self.summary.say(self.seq_len)
        if len(self._train) == 0 or len(self._val) == 0:  # type: ignore[arg-type]
            which = "training" if len(self._train) == 0 else "validation"  # type: ignore[arg-type]
            raise ValueError(
                f"data: no {which} sequences of seq_len={self.seq_len} in {train.n_docs} documents "
                f"({self.split_how}); lower data.seq_len, raise data.max_bytes or give more text.")

    def _unigram(self, corpus: Corpus) -> float:
        """The training bytes' entropy: over the documents held in memory (their separators too), else read from the
        store a block at a time with file reads (a corpus larger than memory is counted without being held, or mapped),
        once: the figure is remembered beside the store for the same training text."""
        if self._train_docs is not None and corpus.raw is not None:
            return unigram_bits([np.frombuffer(b"".join(corpus.raw[i] for i in self._train_docs), np.uint8)])
        # Where the training text lies in the corpus's ids: its documents, or the training windows or chunks of the one
        # document
        if self._train_docs is not None:
            spans = corpus.of(self._train_docs)
        else:
            train: Any = self._train
            spans = train.stream.spans if isinstance(train, PackedWindows) else train.spans
        tokens = corpus.tokens
        if not isinstance(tokens, Mapped):
            return unigram_bits(np.asarray(corpus.tokens[a:b]) for a, b in zip(spans.starts.tolist(),
                                                                               spans.ends.tolist(), strict=True))
        which = hashlib.sha256(spans.starts.tobytes() + spans.ends.tobytes()).hexdigest()
        return float(remembered(store_key("unigram", str(tokens.path), which),
                                lambda: unigram_bits(spans_blocks(tokens, spans.starts, spans.ends))))

    def _split(self, corpus: Corpus, val: Corpus | None) -> tuple[Dataset, Dataset]:
        """Training and validation sequences, disjoint."""
        n_train = corpus.n_docs
        if val is not None:
            self.split_how, self._train_docs = val_how(self.val_path, self._own_val), list(range(n_train))
            return self._sequences(corpus, corpus.pieces), self._sequences(val, val.pieces)
        if n_train >= 2:
            split = split_documents(n_train, self.val_fraction, self.seed)
            self.split_how, self._train_docs = split.how, split.train
            return self._sequences(corpus, corpus.of(split.train)), self._sequences(corpus, corpus.of(split.val))
        self.split_how = f"one document: its last {self.val_fraction:.0%} of windows validate (split by position)"
        pieces = corpus.pieces
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

    def _loader(self, ds: Dataset, shuffle: bool) -> DataLoader:
        collate: Any = PadCollate(self.pad_to, self.pad_id) if self.batching is Batching.documents else None
        collate = pack_collate if self.packing else collate
        g = torch.Generator().manual_seed(self.seed)
        common: dict[str, Any] = dict(collate_fn=collate, generator=g, num_workers=self.num_workers,
                                      persistent_workers=self.num_workers > 0)
        if shuffle and self.length_grouping and isinstance(ds, Chunks):
            # The loader's generator drives the RandomSampler, so resuming restores the order.
            sampler = LengthGroupedBatchSampler(RandomSampler(ds, generator=g), self.batch_size, drop_last=True,
                                                lengths=ds.lengths, window=self.length_grouping)
            return DataLoader(ds, batch_sampler=sampler, **common)
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, drop_last=shuffle, **common)


class TokenizedTextDataModule(TextDataModule):
    """``data=tokenized_text``: ``TextDataModule`` whose tokenizer must be a saved one (never bytes)."""

    @staticmethod
    def check_arguments(tokenizer: str | None = None, **fields: Any) -> str | None:  # type: ignore[override]  # keywords only
        """An empty tokenizer (no model.path to default to) is refused; the rest is ``TextDataModule``'s check."""
        if is_bytes(tokenizer):
            return ("data.tokenizer is empty: give the directory a tokenizer was saved to (usually the model's "
                    "model.path), or use data=text (UTF-8 bytes) with a model built from its configuration.")
        return TextDataModule.check_arguments(tokenizer=tokenizer, **fields)


def _text_bytes(where: str, key: str, text_column: str, enough: int) -> int:
    """Bytes of text ``where`` holds (a table's text column), counted until ``enough``; ``DataError`` when it cannot be
    read."""
    source = resolve(where, key)
    if not source.is_table:  # file sizes, until enough
        return sum(f.stat().st_size for f in capped(source.files, enough)[0])
    rows, _ = load_table(source)
    if len(rows) == 0:
        raise DataError(f"{key}={where} holds no rows. Point {key} at a file with data in it.")
    return int(text_lengths(rows, text_column, source, "data.text_column").sum())


def summarize(corpora: list[Corpus], train: int, val: int, split: str, unigram: float | None) -> DataSummary:
    """The data section of a training corpus and, when ``data.val_path`` is given, its validation corpus."""
    read = [c.read for c in corpora]
    dropped = {(f"{r.key}: " if i else "") + k: n for i, r in enumerate(read) for k, n in r.dropped.items()}
    return DataSummary("; ".join(r.source for r in read), sum(r.files for r in read), sum(r.documents for r in read),
                       sum(len(c.tokens) for c in corpora), train, val, split, dropped=dropped, unigram_bits=unigram)


def _sub(stream: Stream, a: int, b: int) -> Stream:
    """Ids ``[a, b)`` of a single-span stream, as a stream."""
    start = int(stream.spans.starts[0])
    return Stream(stream.tokens, Spans([start + a], [start + b]))
