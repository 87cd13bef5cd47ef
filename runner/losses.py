"""A causal LM's cross-entropy from its last hidden states and its output layer's weight, with or without the
``[tokens x vocab]`` logits: one function for every consumer (training, validation, ``runner eval``, and per-token
log-probabilities for preference tuning).

:func:`linear_cross_entropy` ``(hidden, weight, targets, rows=...)``:

- ``rows=None``: the reference, what runner has always computed: ``logits = hidden @ weight.T (+ bias)``, then
  cross-entropy in float32 over the positions whose target is not ``ignore_index``.
- ``rows=R``: torch's own chunked loss, ``torch.nn.functional.linear_cross_entropy`` with
  ``LinearCrossEntropyOptions(batch_chunk_size=R)`` (torch 2.13 and later): the logits of ``R`` positions at a
  time, never all of them. For ``reduction="mean"``/``"sum"`` torch computes the gradients of the hidden states and
  the weight in the same pass (a ``[R x vocab]`` buffer at a time) and backward only scales them; for ``"none"``
  backward recomputes them chunk by chunk. The op is a ``torch.library`` custom op with a fake implementation:
  ``torch.compile`` traces it as one opaque node (no graph break), and it runs the same code in eager, compiled
  and no-grad calls. Out-of-range targets raise there, compiled too (the unchunked loss compiled by Inductor on the
  CPU aborts the process instead: pytorch issue 135546).

Under autocast (``bf16-mixed``), both paths multiply in the autocast dtype as ``F.linear`` does there, and
accumulate in float32; the chunked op returns its loss in that dtype.

``rows`` is a Python int fixed before the step is compiled (:func:`chunk_rows`): the chunk count of a batch
follows from its own size inside the op, so a batch of another size (a dynamic shape, the last batch) needs no
recompile.

This module imports only torch: every layer of runner may call it.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
"""Targets left out of the loss (``runner.data.sequences.padding.IGNORE_INDEX``, transformers' and torch's default)."""

CHUNK_BYTES = 256 * 2**20
"""Float32 logits of one chunk, at most, when the chunk count is not given (``loss.chunks``): 512 positions of a
128,256-id vocabulary, 2,048 of 32,000. Measured on the CPU (``benchmarks/vocab_loss.py``, docs/large-vocab.md):
chunks of this size ran no slower than the compiled whole logits, and other sizes within the machine's noise of them;
a chunk holds about two buffers of its size."""

MIN_TORCH = (2, 13)
"""The first torch with ``torch.nn.functional.linear_cross_entropy`` (2.11 and 2.12 have none)."""

Reduction = Literal["mean", "sum", "none"]


def chunking_unavailable() -> str | None:
    """Why this torch cannot chunk the loss, in a clause (None: it can)."""
    if hasattr(F, "linear_cross_entropy") and hasattr(torch.nn, "LinearCrossEntropyOptions"):
        return None
    return (f"torch {torch.__version__} has no torch.nn.functional.linear_cross_entropy (torch "
            f"{MIN_TORCH[0]}.{MIN_TORCH[1]} and later have it)")


def chunk_rows(vocab: int, tokens: int | None = None, chunks: int | None = None) -> int:
    """Positions per chunk: ``tokens / chunks`` rounded up when ``chunks`` is given (``tokens``: a full step's
    positions); else the most positions, a power of two, whose float32 logits fit in :data:`CHUNK_BYTES`."""
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
    """Cross-entropy of ``hidden @ weight.T + bias`` against ``targets``, the logits never all held when ``rows``
    is given (module docstring).

    Args:
        hidden: ``[..., hidden_size]``, the output layer's input (a causal LM's last hidden states).
        weight: ``[vocab, hidden_size]``, the output layer's weight (tied to the embedding or not).
        targets: ``[...]`` (``hidden``'s leading shape), class ids; ``ignore_index`` where a position has no target.
        bias: ``[vocab]`` or None.
        rows: positions per chunk (:func:`chunk_rows`); None computes the whole logits (the reference).
        reduction: ``"mean"`` over the positions with a target (NaN when there is none, as ``F.cross_entropy``),
            ``"sum"``, or ``"none"``: each position's loss, ``targets``' shape, 0 where ignored; its negation is
            each target's log-probability.
        ignore_index: the target value left out of the loss.
    """
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and targets {tuple(targets.shape)}: the targets' shape must "
                         "be the hidden states' without their last dimension")
    h, y = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    if rows is None:
        logits = F.linear(h, weight, bias).float()
        out = F.cross_entropy(logits, y, ignore_index=ignore_index, reduction=reduction)
        return out.view(targets.shape) if reduction == "none" else out
    h, weight, bias = _autocast_operands(h, weight, bias)
    options = torch.nn.LinearCrossEntropyOptions(
        batch_chunk_size=rows, chunking_method=None,
        # True under torch.compile, where torch forces it anyway (its warning asks for it); eager backward then
        # scales the stored gradients in place instead of allocating a copy.
        allow_retain_graph=torch.compiler.is_compiling())
    out = F.linear_cross_entropy(h, weight, y, linear_bias=bias, reduction=reduction, ignore_index=ignore_index,
                                 options=options)
    return out.view(targets.shape) if reduction == "none" else out


def _autocast_operands(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The operands in autocast's dtype where autocast is on for their device (what ``F.linear`` would multiply
    in; the custom op is not autocast's), else one dtype for all: the hidden states'."""
    device = h.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else h.dtype
    cast = [t if t is None or t.dtype == dtype else t.to(dtype) for t in (h, weight, bias)]
    return cast[0], cast[1], cast[2]  # type: ignore[return-value]
