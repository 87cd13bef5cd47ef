"""Examples for a causal LM, one per item (padded per batch) or packed into rows of exactly ``data.seq_len``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from runner.data.sequences.padding import IGNORE_INDEX
from runner.data.sequences.windows import Spans, Tokens
from runner.packing import PackedInputs
from runner.packing.bins import PackRows, pack_rows


class Examples(Dataset[torch.Tensor]):
    """The examples at ``spans`` of ``tokens``; ``mask`` (the same layout, 1 on answers) limits the loss to the answers
    when ``answers_only``; without one every target is in the loss (text documents)."""

    def __init__(self, tokens: Tokens, spans: Spans, mask: Tokens | None = None, answers_only: bool = True) -> None:
        self.tokens, self.spans, self.mask, self.answers_only = tokens, spans, mask, answers_only

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def lengths(self) -> np.ndarray:
        """Each example's ids."""
        return self.spans.lengths

    def labelled(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Example ``i``'s ids and labels (``IGNORE_INDEX`` outside the loss), int64."""
        a, b = int(self.spans.starts[i]), int(self.spans.ends[i])
        ids = np.asarray(self.tokens[a:b], dtype=np.int64)
        if self.mask is None or not self.answers_only:
            return ids, ids
        return ids, np.where(np.asarray(self.mask[a:b]) > 0, ids, IGNORE_INDEX)

    def __getitem__(self, i: int) -> torch.Tensor:
        ids, labels = self.labelled(i)
        return torch.from_numpy(np.stack([ids, labels]))


class Packs(Dataset[torch.Tensor]):
    """Rows of exactly ``seq_len`` positions holding whole examples; an item is ``[4, seq_len]``: inputs, targets,
    position ids, document ids."""

    def __init__(self, examples: Examples, seq_len: int, pad_id: int, rows: PackRows | None = None) -> None:
        self.examples, self.seq_len, self.pad_id = examples, seq_len, pad_id
        positions = examples.lengths - 1
        self.rows = rows if rows is not None else pack_rows(positions, seq_len)
        # Positions the examples fill; the rest of ``len(self) * seq_len`` is padding
        self.positions = int(positions.sum())

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, r: int) -> torch.Tensor:
        out = np.empty((4, self.seq_len), dtype=np.int64)
        at = 0
        row = self.rows[r].tolist()
        for doc, i in enumerate(row):
            ids, labels = self.examples.labelled(i)
            n = len(ids) - 1
            out[0, at:at + n], out[1, at:at + n] = ids[:-1], labels[1:]
            out[2, at:at + n], out[3, at:at + n] = np.arange(n), doc
            at += n
        pad = self.seq_len - at
        out[0, at:], out[1, at:], out[2, at:], out[3, at:] = self.pad_id, IGNORE_INDEX, np.arange(pad), len(row)
        return torch.from_numpy(out)

    def figures(self, batch_size: int) -> dict[str, Any]:
        return packing_figures(len(self.rows), len(self.examples), self.seq_len, self.positions, batch_size)


def pack_collate(items: list[torch.Tensor]) -> tuple[PackedInputs, torch.Tensor]:
    """Packs (``[4, seq_len]`` each) as ``(PackedInputs, targets)``, every tensor ``[batch, seq_len]``."""
    stacked = torch.stack(items)
    return (PackedInputs(stacked[:, 0].contiguous(), stacked[:, 2].contiguous(), stacked[:, 3].contiguous()),
            stacked[:, 1].contiguous())


def packing_figures(rows: int, examples: int, length: int, positions: int, batch_size: int) -> dict[str, Any]:
    """What packing made of the training examples: ``rows`` of ``length`` positions, ``positions`` of them filled (the
    rest padding), and the one batch shape they make."""
    total = rows * length
    return {"data/packs": rows, "data/examples_per_pack": round(examples / max(rows, 1), 2),
            "data/packing_padding_pct": round(100.0 * (total - positions) / total if total else 0.0, 2),
            "data/batch_shape": f"[{batch_size}, {length}] every batch (packed rows)"}
