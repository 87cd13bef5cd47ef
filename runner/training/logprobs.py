"""The log-probability a model gives each completion of a batch: the one place it is computed."""

from __future__ import annotations

from typing import Any

import torch

from runner.data.preference.batch import PairInputs
from runner.data.sequences.padding import IGNORE_INDEX
from runner.training.loss import Loss, lm_loss


def token_logps(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``[rows, T]``: the log-probability of each target under ``logits`` ``[rows, T, vocab]`` (float32); 0 where
    the target is ``IGNORE_INDEX``."""
    return -lm_loss(logits, targets, reduction="none")


def sequence_sums(per_token: torch.Tensor, targets: torch.Tensor, slots: torch.Tensor,
                  sequences: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sums, counts)``, each ``[sequences]`` float32: ``per_token`` ``[rows, T]`` (each target's log-probability,
    0 outside the loss) summed per sequence, and how many targets each has. ``slots`` ``[rows, T]`` says which
    sequence each position's target belongs to (a row of padded pairs is one sequence; a packed row holds several);
    shapes depend on ``sequences``, never on the data."""
    values = per_token.float().flatten()
    index = slots.flatten()
    sums = torch.zeros(sequences, dtype=values.dtype, device=values.device).index_add(0, index, values)
    counted = (targets.flatten() != IGNORE_INDEX).to(values.dtype)
    counts = torch.zeros(sequences, dtype=values.dtype, device=values.device).index_add(0, index, counted)
    return sums, counts


def sequence_logps(logits: torch.Tensor, targets: torch.Tensor, slots: torch.Tensor,
                   sequences: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sequence_sums` of the log-probabilities under whole ``logits`` ``[rows, T, vocab]``."""
    return sequence_sums(token_logps(logits, targets), targets, slots, sequences)


def pair_logps(loss: Loss, model: Any, inputs: PairInputs, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sequence_sums` of ``model``'s log-probability of every sequence of the batch (``2P``: the chosen, then
    the rejected), through ``loss`` (whole or chunked logits, module docstring)."""
    per_token = -loss(model, inputs.ids, targets, reduction="none")
    return sequence_sums(per_token, targets, inputs.slots, 2 * inputs.pair_slots)
