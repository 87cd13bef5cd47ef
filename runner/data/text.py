"""Byte-level language-modelling data: packed windows or one variable-length sequence per document.

Targets of padded positions are ``IGNORE_INDEX``, so padding never counts in the loss. How far a
batch of documents is padded is the dynamic-shape policy's choice (``pad_to``), set by the builder.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler

from runner.config.targets import Batching
from runner.data.corpus import describe_missing_text, read_documents, text_bytes, unigram_bits_per_byte

IGNORE_INDEX = -100


class PadTo:
    """Where a batch whose longest sequence is ``n`` is padded to: ``n`` itself (no lengths
    given), or the first of ``lengths`` that fits (a single length pads everything to it).

    A plain class, not a dataclass: ``build_datamodule`` passes it through Hydra's ``instantiate``,
    which turns a dataclass argument into a ``DictConfig`` (and the collate then fails)."""

    __slots__ = ("lengths",)

    def __init__(self, lengths: Sequence[int] = ()) -> None:
        self.lengths: tuple[int, ...] = tuple(lengths)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PadTo) and other.lengths == self.lengths

    def __hash__(self) -> int:
        return hash(self.lengths)

    def __repr__(self) -> str:
        return f"PadTo({self.lengths})"

    def __call__(self, n: int) -> int:
        if not self.lengths:
            return n
        i = bisect_left(self.lengths, n)
        if i == len(self.lengths):
            raise ValueError(f"a sequence of {n} tokens exceeds the largest pad length {self.lengths[-1]}")
        return self.lengths[i]


class PackedWindows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Non-overlapping windows of ``seq_len + 1`` bytes over the concatenated documents."""

    def __init__(self, data: torch.Tensor, seq_len: int) -> None:
        self.data, self.seq_len = data, seq_len

    def __len__(self) -> int:
        return max(0, (len(self.data) - 1) // self.seq_len)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.data[i * self.seq_len : (i + 1) * self.seq_len + 1].long()
        return chunk[:-1], chunk[1:]


class DocumentChunks(Dataset[torch.Tensor]):
    """One sequence per document, cut into chunks of at most ``seq_len + 1`` bytes. Files are first
    split at ``separator`` (if given) into documents."""

    def __init__(self, docs: Sequence[bytes], seq_len: int, min_len: int, separator: str | None = None) -> None:
        if separator:
            docs = [part for d in docs for part in d.split(separator.encode())]
        self.chunks = [
            torch.frombuffer(bytearray(d[i : i + seq_len + 1]), dtype=torch.uint8)
            for d in docs
            for i in range(0, len(d), seq_len + 1)
            if len(d[i : i + seq_len + 1]) > min_len
        ]

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.chunks[i]


@dataclass(frozen=True)
class PadCollate:
    """Pads a list of chunks to ``pad_to(longest)``; inputs with 0, targets with IGNORE_INDEX."""

    pad_to: PadTo

    def __call__(self, chunks: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.pad_to(max(len(c) for c in chunks) - 1)
        x = torch.zeros(len(chunks), t, dtype=torch.long)
        y = torch.full((len(chunks), t), IGNORE_INDEX, dtype=torch.long)
        for row, c in enumerate(chunks):
            n = len(c) - 1
            x[row, :n] = c[:-1]
            y[row, :n] = c[1:]
        return x, y


class LengthGroupedBatchSampler(BatchSampler):
    """Batches of similar length: the sampler's (shuffled) order is cut into windows of ``window``
    batches, each window is sorted by length and cut into batches, and the batches of a window are
    shuffled. A batch padded to its longest sequence then holds little padding, which is what lets
    the ``dynamic`` policies beat ``static`` (and one reason ``bucket`` exists).

    The order depends only on the sampler's order (the window shuffle is seeded by the window's first
    index), so it is as deterministic and resumable as the sampler, and Lightning can swap in a
    ``DistributedSampler`` under DDP (it re-creates batch samplers with the same arguments).
    """

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool,
                 lengths: Sequence[int] = (), window: int = 64) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.lengths, self.window = list(lengths), window

    def __iter__(self) -> Iterator[list[int]]:
        indices = list(self.sampler)
        span = self.batch_size * self.window
        whole = len(indices) - len(indices) % self.batch_size if self.drop_last else len(indices)
        for w in range(0, whole, span):
            chunk = sorted(indices[w:min(w + span, whole)], key=self.lengths.__getitem__)
            batches = [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
            random.Random(indices[w]).shuffle(batches)
            yield from batches


class TextDataModule(L.LightningDataModule):
    """Byte-level text from ``path``: every UTF-8 text file under a directory, whatever its name, or
    one file (default: the Python stdlib source). Documents are split train/val by a seeded
    shuffle, so the split is the same on every run and every rank."""

    def __init__(
        self,
        path: str | None = None,
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
        self.path, self.seq_len, self.min_len, self.separator = path, seq_len, min_len, separator
        self.batching = Batching(batching) if isinstance(batching, str) else batching
        self.batch_size, self.max_bytes, self.val_fraction = batch_size, max_bytes, val_fraction
        self.seed, self.num_workers, self.length_grouping = seed, num_workers, length_grouping
        self.pad_to = pad_to or PadTo()
        self.unigram_bits: float | None = None
        self._train: Dataset | None = None
        self._val: Dataset | None = None

    @staticmethod
    def check_arguments(path: str | None = None, seq_len: int = 256, batch_size: int = 16, **_: Any) -> str | None:
        """What is wrong with these arguments, in one paragraph, before a run directory exists (None:
        nothing): a ``path`` that holds no text, or less than one batch of it. A missing path is the
        config check's to name."""
        if path is None or not Path(path).expanduser().exists():
            return None
        need = seq_len * batch_size + 1
        have = text_bytes(path, enough=need)
        if have == 0:
            return describe_missing_text(path)
        if have < need:
            return (f"data.path={path} holds {have} bytes of text, less than one batch takes (data.batch_size="
                    f"{batch_size} x data.seq_len={seq_len} = {need - 1} bytes), so training would have no batch. "
                    "Point data.path at more text, or lower data.seq_len or data.batch_size.")
        return None

    def check(self) -> None:
        """Fail fast (before any model is built) if the data cannot be read."""
        read_documents(self.path, max_bytes=1)

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        docs = read_documents(self.path, self.max_bytes)
        order = list(range(len(docs)))
        random.Random(self.seed).shuffle(order)
        n_val = max(1, round(len(docs) * self.val_fraction)) if len(docs) > 1 else 0
        val_docs = [docs[i] for i in order[:n_val]] or docs[:1]
        train_docs = [docs[i] for i in order[n_val:]] or docs
        self.unigram_bits = unigram_bits_per_byte(train_docs)
        self._train, self._val = (self._dataset(d) for d in (train_docs, val_docs))
        if len(self._train) == 0:  # type: ignore[arg-type]
            raise ValueError(
                f"data: no training sequences of seq_len={self.seq_len} in {len(train_docs)} documents; "
                "lower data.seq_len or raise data.max_bytes."
            )

    def _dataset(self, docs: list[bytes]) -> Dataset:
        if self.batching is Batching.packed:
            flat = torch.frombuffer(bytearray(b"".join(docs)), dtype=torch.uint8)
            return PackedWindows(flat, self.seq_len)
        return DocumentChunks(docs, self.seq_len, self.min_len, self.separator)

    def _loader(self, ds: Dataset | None, shuffle: bool) -> DataLoader:
        assert ds is not None, "setup() first"
        collate = PadCollate(self.pad_to) if self.batching is Batching.documents else None
        g = torch.Generator().manual_seed(self.seed)
        common: dict[str, Any] = dict(collate_fn=collate, generator=g, num_workers=self.num_workers,
                                      persistent_workers=self.num_workers > 0)
        if shuffle and self.length_grouping and isinstance(ds, DocumentChunks):
            # The loader's generator drives the RandomSampler, so resuming restores the order.
            sampler = LengthGroupedBatchSampler(RandomSampler(ds, generator=g), self.batch_size, drop_last=True,
                                                lengths=[len(c) for c in ds.chunks], window=self.length_grouping)
            return DataLoader(ds, batch_sampler=sampler, **common)
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, drop_last=shuffle, **common)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._val, shuffle=False)
