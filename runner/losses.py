"""A causal LM's cross-entropy from its last hidden states and output weight, with or without the whole logits."""

# One function for every consumer: training, validation, runner eval, and preference tuning's log-probabilities.

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F

# Targets left out of the loss (``runner.data.sequences.padding.IGNORE_INDEX``, transformers' and torch's default)
IGNORE_INDEX = -100

# Float32 logits of one chunk, at most, when the chunk count is not given (``loss.chunks``): 512 positions of a
# 128,256-id vocabulary, 2,048 of 32,000
CHUNK_BYTES = 256 * 2**20

MIN_TORCH = (2, 13)  # The first torch with ``torch.nn.functional.linear_cross_entropy`` (2.11 and 2.12 have none)

Reduction = Literal["mean", "sum", "none"]


def chunking_unavailable() -> str | None:
    """Why this torch cannot chunk the loss, in a clause (None: it can)."""
    if hasattr(F, "linear_cross_entropy") and hasattr(torch.nn, "LinearCrossEntropyOptions"):
        return None
    return (f"torch {torch.__version__} has no torch.nn.functional.linear_cross_entropy (torch "
            f"{MIN_TORCH[0]}.{MIN_TORCH[1]} and later have it)")


def chunk_rows(vocab: int, tokens: int | None = None, chunks: int | None = None) -> int:
    """Positions per chunk: ``tokens / chunks`` rounded up when ``chunks`` is given (``tokens``: a full step's
    positions); else the most positions, a power of two, whose float32 logits fit in ``CHUNK_BYTES``."""
    if chunks is not None:
        if tokens is None or chunks < 1:
            raise ValueError(f"chunks={chunks} needs the positions of a step (tokens={tokens}) and chunks >= 1")
        return max(1, math.ceil(tokens / chunks))
    fit = max(1, CHUNK_BYTES // (4 * max(1, vocab)))
    return 1 << (fit.bit_length() - 1)


def chunk_count(tokens: int, rows: int) -> int:
    """Chunks of ``rows`` positions a batch of ``tokens`` positions is cut into."""
    return max(1, math.ceil(tokens / rows))


def logits_bytes(tokens: int, vocab: int) -> int:
    """Bytes of one float32 copy of a step's logits, ``[tokens x vocab]``."""
    return 4 * tokens * vocab


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                         bias: torch.Tensor | None = None, rows: int | None = None, reduction: Reduction = "mean",
                         ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Cross-entropy of ``hidden @ weight.T + bias`` against ``targets``, the logits never all held when ``rows`` is
    given."""
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and targets {tuple(targets.shape)}: the targets' shape must "
                         "be the hidden states' without their last dimension")
    h, y = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    if rows is None:  # the reference: whole logits, cross-entropy in float32
        out = F.cross_entropy(F.linear(h, weight, bias).float(), y, ignore_index=ignore_index, reduction=reduction)
    else:
        # torch's chunked loss (a custom op: one opaque node to torch.compile, no graph break), R positions' logits
        # at a time; out-of-range targets raise there, compiled too (the unchunked loss Inductor compiles on the CPU
        # aborts: pytorch issue 135546). ``rows`` is fixed before compile; a batch of another size needs no recompile.
        # The operands in autocast's dtype where it is on (the custom op is not autocast's), else in the hidden
        # states'.
        device = h.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else h.dtype
        h, weight, bias = h.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype)
        options = torch.nn.LinearCrossEntropyOptions(
            batch_chunk_size=rows, chunking_method=None,
            # True under torch.compile, where torch forces it anyway (its warning asks for it); eager backward then
            # scales the stored gradients in place instead of allocating a copy.
            allow_retain_graph=torch.compiler.is_compiling())
        out = F.linear_cross_entropy(h, weight, y, linear_bias=bias, reduction=reduction, ignore_index=ignore_index,
                                     options=options)
    return out.view(targets.shape) if reduction == "none" else out
