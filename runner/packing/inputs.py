"""``PackedInputs``: the model's side of a packed batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PackedInputs:
    """Rows of examples laid end to end, each ``[batch, seq_len]`` (int64)."""

    input_ids: torch.Tensor
    # Each position's place in its own example: 0 where an example starts (padding counts on from 0 too)
    position_ids: torch.Tensor
    # Which example of its row each position belongs to, non-decreasing along the row: 0, 0, 0, 1, 1, 2, ...; a row's
    # padding is one more example of its own (it attends only to itself, and no target counts it)
    document_ids: torch.Tensor
    # Where examples share a prefix (a preference pair's prompt, once for its two completions): the example each
    # position may also attend to, never above its own (``runner.packing.dense_document_mask``); None: none
    parent_ids: torch.Tensor | None = None
