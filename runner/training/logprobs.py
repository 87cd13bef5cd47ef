"""The log-probability a model gives each completion of a batch: the one place it is computed.

Every preference objective reads its policy's (and DPO its reference's) per-sequence log-probabilities from
:func:`sequence_logps`: the per-token log-probability of each target, summed per sequence, with the number of targets
summed. The per-token values come from ``cross_entropy(reduction="none")`` on the logits: one float32 copy of the
logits at most (the cast; none when they are float32 already), where ``log_softmax`` and a gather would hold a second
``[tokens, vocab]`` tensor. A target outside the loss (``IGNORE_INDEX``: prompts, padding) adds 0.

This is the function a chunked cross-entropy (per-token losses from the hidden states and the output weight,
without ``[tokens, vocab]`` logits) takes over: its callers hand it the model's output and the batch's targets, and
read sums per sequence back.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from runner.data.padding import IGNORE_INDEX


def token_logps(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``[rows, T]``: the log-probability of each target under ``logits`` ``[rows, T, vocab]`` (float32); 0 where
    the target is ``IGNORE_INDEX``."""
    flat = F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(), ignore_index=IGNORE_INDEX,
                           reduction="none")
    return -flat.view(targets.shape)


def sequence_logps(logits: torch.Tensor, targets: torch.Tensor, slots: torch.Tensor,
                   sequences: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sums, counts)``, each ``[sequences]`` float32: the log-probability of each sequence's targets, summed, and
    how many targets it has. ``slots`` ``[rows, T]`` says which sequence each position's target belongs to (a row of
    padded pairs is one sequence; a packed row holds several); shapes depend on ``sequences``, never on the data."""
    per_token = token_logps(logits, targets).flatten()
    index = slots.flatten()
    sums = torch.zeros(sequences, dtype=per_token.dtype, device=per_token.device).index_add(0, index, per_token)
    counted = (targets.flatten() != IGNORE_INDEX).to(per_token.dtype)
    counts = torch.zeros(sequences, dtype=per_token.dtype, device=per_token.device).index_add(0, index, counted)
    return sums, counts
