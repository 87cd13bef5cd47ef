"""Padding a batch of variable-length sequences: to where (``PadTo``), with what (``PadCollate``: targets with
``IGNORE_INDEX``, never in the loss), and batches of similar length (``LengthGroupedBatchSampler``)."""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler

IGNORE_INDEX = -100


class PadTo:
    """Where a batch whose longest sequence is ``n`` is padded to: ``n`` itself (no lengths given), or the first of
    ``lengths`` that fits (a single length pads everything to it)."""

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


@dataclass(frozen=True)
class PadCollate:
    """Pads a list of ``seq_len + 1``-token chunks to ``pad_to(longest)``: inputs with ``pad_id``, targets with
    IGNORE_INDEX (so whatever id pads the inputs never counts)."""

    pad_to: PadTo
    pad_id: int = 0

    def __call__(self, chunks: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.pad_to(max(c.shape[-1] for c in chunks) - 1)
        x = torch.full((len(chunks), t), self.pad_id, dtype=torch.long)
        y = torch.full((len(chunks), t), IGNORE_INDEX, dtype=torch.long)
        for row, c in enumerate(chunks):
            ids, labels = (c, c) if c.dim() == 1 else (c[0], c[1])
            n = len(ids) - 1
            x[row, :n] = ids[:-1]
            y[row, :n] = labels[1:]
        return x, y


class LengthGroupedBatchSampler(BatchSampler):
    """Batches of similar length: the sampler's (shuffled) order is cut into windows of ``window`` batches, each window
    is sorted by length and cut into batches, and the batches of a window are shuffled."""

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


def seeded_loader(ds: Any, batch_size: int, seed: int, num_workers: int, shuffle: bool = False,
                  drop_last: bool | None = None, collate_fn: Any = None) -> DataLoader:
    """Batches of ``ds`` in an order ``seed`` fixes (so resuming restores it); training's last partial batch dropped."""
    return DataLoader(ds, batch_size=batch_size, shuffle=shuffle, drop_last=shuffle if drop_last is None else drop_last,
                      generator=torch.Generator().manual_seed(seed), collate_fn=collate_fn, num_workers=num_workers,
                      persistent_workers=num_workers > 0)
