"""Preference pairs as batches: both sequences of every pair (prompt + chosen, prompt + rejected) in one batch, so one
forward computes them all, and every batch of a run one shape after warm-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from runner.data.preference.encode import FittedPairs
from runner.data.sequences.packed import packing_figures
from runner.data.sequences.padding import IGNORE_INDEX, PadTo
from runner.packing import PackedInputs, best_fit_decreasing

CHOSEN, REJECTED = 0, 1


@dataclass
class PairInputs:
    """What a preference step reads beside the targets."""

    ids: torch.Tensor | PackedInputs  # The model's input: ``[rows, T]`` token ids, or packed rows
    # ``[rows, T]`` int64: the sequence each position's target belongs to (``0 .. 2P - 1``; 0 where there is no target)
    slots: torch.Tensor
    pairs: torch.Tensor  # ``[P]`` float: 1 where a pair is, 0 for an empty slot
    # ``[2P]`` float: precomputed reference log-probabilities, chosen then rejected (zeros where none were)
    reference: torch.Tensor
    index: torch.Tensor  # ``[P]`` int64: each pair's index in its dataset (-1 for an empty slot)

    @property
    def pair_slots(self) -> int:
        return int(self.pairs.shape[0])


def labelled(pairs: FittedPairs, i: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Pair ``i``'s sequence ``side``: its ids and labels (``IGNORE_INDEX`` on the prompt)."""
    ids, start = pairs.sequence(i, side)
    labels = ids.copy()
    labels[:start] = IGNORE_INDEX
    return ids, labels


class PairSequences(Dataset[dict[str, Any]]):
    """Each pair as its two sequences, for ``PairCollate``."""

    def __init__(self, pairs: FittedPairs) -> None:
        self.fitted = pairs
        self.reference: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.fitted)

    def __getitem__(self, i: int) -> dict[str, Any]:
        sides = [labelled(self.fitted, i, s) for s in (CHOSEN, REJECTED)]
        ref = self.reference[i] if self.reference is not None else np.zeros(2, np.float32)
        return {"sides": sides, "reference": ref, "index": i}


@dataclass(frozen=True)
class PairCollate:
    """Pairs (up to ``batch_size``) as ``[2 x batch_size, pad_to(longest)]``: chosen sequences in rows ``0 .."""

    pad_to: PadTo
    pad_id: int
    batch_size: int

    def __call__(self, items: list[dict[str, Any]]) -> tuple[PairInputs, torch.Tensor]:
        b = self.batch_size
        t = self.pad_to(max(len(ids) - 1 for item in items for ids, _ in item["sides"]))
        x = torch.full((2 * b, t), self.pad_id, dtype=torch.long)
        y = torch.full((2 * b, t), IGNORE_INDEX, dtype=torch.long)
        reference = torch.zeros(2, b)
        index = torch.full((b,), -1, dtype=torch.long)
        for p, item in enumerate(items):
            for side, (ids, labels) in enumerate(item["sides"]):
                n = len(ids) - 1
                x[side * b + p, :n] = torch.from_numpy(ids[:-1])
                y[side * b + p, :n] = torch.from_numpy(labels[1:])
            reference[:, p] = torch.as_tensor(item["reference"])
            index[p] = item["index"]
        pairs = (torch.arange(b) < len(items)).float()
        slots = torch.arange(2 * b)[:, None].expand(2 * b, t).contiguous()
        return PairInputs(x, slots, pairs, reference.flatten(), index), y


class PairPacks(Dataset[dict[str, Any]]):
    """Rows of ``2 x seq_len`` positions holding whole pairs, each sharing its prompt; ``per_row``: ``K``, the most
    pairs a row holds (pass the same to every dataset of a run: one shape for training and validation)."""

    def __init__(self, pairs: FittedPairs, seq_len: int, pad_id: int) -> None:
        self.fitted, self.seq_len, self.pad_id = pairs, seq_len, pad_id
        self.length = 2 * seq_len
        shared = np.maximum(pairs.prompts.lengths - 1, 0)  # the prompt but its last id, once
        sizes = pairs.positions().sum(axis=1) - shared
        self.rows = best_fit_decreasing(sizes.tolist(), self.length)
        self.positions = int(sizes.sum())
        self.per_row = max((len(r) for r in self.rows), default=1)
        self.reference: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, r: int) -> dict[str, Any]:
        k = self.per_row
        # inputs, targets, positions, documents, parents, slots
        out = np.zeros((6, self.length), dtype=np.int64)
        out[1] = IGNORE_INDEX
        reference = np.zeros((2, k), np.float32)
        index = np.full(k, -1, np.int64)
        at = doc = 0
        for j, i in enumerate(self.rows[r]):
            sides = [labelled(self.fitted, i, side) for side in (CHOSEN, REJECTED)]
            shared = max(int(self.fitted.prompts.lengths[i]) - 1, 0)
            ids, labels = sides[CHOSEN]
            out[0, at:at + shared], out[1, at:at + shared] = ids[:shared], labels[1:shared + 1]
            out[2, at:at + shared], out[3:5, at:at + shared] = np.arange(shared), doc
            at += shared
            for side, (ids, labels) in enumerate(sides):
                n = len(ids) - 1 - shared  # this completion's positions: the prompt's last id, then its own
                out[0, at:at + n], out[1, at:at + n] = ids[shared:-1], labels[shared + 1:]
                out[2, at:at + n], out[3, at:at + n] = np.arange(shared, shared + n), doc + 1 + side
                out[4, at:at + n], out[5, at:at + n] = doc, side * k + j
                at += n
            doc += 3
            if self.reference is not None:
                reference[:, j] = self.reference[i]
            index[j] = i
        out[0, at:], out[2, at:], out[3:5, at:] = self.pad_id, np.arange(self.length - at), doc
        return {"tokens": out, "reference": reference, "index": index, "pairs": len(self.rows[r])}

    def figures(self, batch_size: int) -> dict[str, Any]:
        return packing_figures(len(self.rows), len(self.fitted), self.length, self.positions, batch_size)


@dataclass(frozen=True)
class PackCollate:
    """Packed rows (up to ``batch_size``, each of ``per_row`` pair slots) as ``(PairInputs, targets)``, every tensor
    ``[batch_size, 2 x seq_len]``; a missing row is padding with no target."""

    batch_size: int
    per_row: int
    length: int
    pad_id: int

    def __call__(self, items: list[dict[str, Any]]) -> tuple[PairInputs, torch.Tensor]:
        b, k = self.batch_size, self.per_row
        tokens = np.zeros((b, 6, self.length), dtype=np.int64)
        tokens[:, 0], tokens[:, 1], tokens[:, 2] = self.pad_id, IGNORE_INDEX, np.arange(self.length)
        reference = np.zeros((b, 2, k), np.float32)
        index = np.full((b, k), -1, np.int64)
        pairs = np.zeros((b, k), np.float32)
        for r, item in enumerate(items):
            if item["tokens"].shape[1] != self.length or item["reference"].shape[1] != k:
                raise ValueError(f"a packed row of {item['tokens'].shape[1]} positions and "
                                 f"{item['reference'].shape[1]} pair slots; this collate makes {self.length} and {k}")
            tokens[r], reference[r], index[r] = item["tokens"], item["reference"], item["index"]
            pairs[r, :item["pairs"]] = 1
        local = tokens[:, 5]
        row = np.arange(b)[:, None]
        slots = (local // k) * (b * k) + row * k + local % k  # side * P + the pair's slot
        t = torch.from_numpy(tokens)
        ids = PackedInputs(t[:, 0].contiguous(), t[:, 2].contiguous(), t[:, 3].contiguous(), t[:, 4].contiguous())
        return (PairInputs(ids, torch.from_numpy(slots), torch.from_numpy(pairs.reshape(-1)),
                           torch.from_numpy(reference.transpose(1, 0, 2).reshape(-1).copy()),
                           torch.from_numpy(index.reshape(-1))), t[:, 1].contiguous())
