"""Typed schema of ``loss``: how a causal language model's cross-entropy is computed (docs/large-vocab.md),
referenced by ``runner.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Optional


class Chunked(Enum):
    """``loss.chunked``: whether the loss is computed a chunk of positions at a time."""

    auto = "auto"  # chunked where a step's logits would be large (runner.config.decisions.loss.LARGE_LOGITS_BYTES)
    true = "true"  # chunked, or refused before the run where it cannot be
    false = "false"  # the whole [tokens x vocab] logits, as Lightning's users compute them


@dataclass
class LossConfig:
    """The ``loss`` node: a causal LM's cross-entropy from its full logits, or chunked (never the whole logits)."""

    # auto (chunked where a step's float32 logits would exceed 256 MiB), true or false. A causal LM whose output layer
    # runner finds (runner's GPT, transformers' Llama family, Qwen, Mistral, GPT-2, a model of your own with
    # output_layer() and forward(x, return_hidden=True)) computes its loss from its last hidden states and its output
    # layer's weight a chunk of positions at a time (torch.nn.functional.linear_cross_entropy, torch 2.13 and later), so
    # the [tokens x vocab] logits are never held. Typed Any: the command line's true and false arrive as booleans, which
    # an enum field refuses; mode reads it.
    chunked: Any = "auto"
    # Chunks a full step's positions (data.batch_size x data.seq_len) are cut into. None: as many as keep each chunk's
    # float32 logits within 256 MiB (512 positions of a 128,256-id vocabulary).
    chunks: Optional[int] = None

    @property
    def mode(self) -> Chunked | None:
        """``chunked`` as a :class:`Chunked`; None when it is none of auto, true, false (the check says so)."""
        value = self.chunked
        if isinstance(value, Chunked):
            return value
        # the command line's true and false arrive as booleans, whose str() lowered is the member's name
        return Chunked.__members__.get(str(value).lower()) if isinstance(value, (bool, str)) else None
