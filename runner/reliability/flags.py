"""A non-finite loss as a flag, 0 finite, 1 inf, 2 nan (the worst wins across ranks), with the first step it
appeared at; computed on the device without a host sync."""

from __future__ import annotations

import functools
import math

import torch


def nonfinite_flag(loss: torch.Tensor) -> torch.Tensor:
    """0 (finite), 1 (inf) or 2 (nan), as a tensor on the loss's device (no host sync yet)."""
    nan = torch.isnan(loss).any()
    inf = torch.isinf(loss).any()
    return 2 * nan.long() + (inf & ~nan).long()


def _stacked(losses: list[tuple[int, torch.Tensor]]) -> torch.Tensor:
    """The scalar losses as one tensor in their promoted dtype (never narrowed: a finite float64 1e300 would be
    inf as float32)."""
    dtype = functools.reduce(torch.promote_types, (loss.dtype for _, loss in losses))
    return torch.stack([loss.reshape(()).to(dtype) for _, loss in losses])


def pending_flags(losses: list[tuple[int, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The worst flag of the kept ``(step, loss)`` pairs and the first step whose flag is not 0 (0 when none), as
    device scalars: a few ops for the whole interval instead of a dozen per micro-batch."""
    if all(loss.numel() == 1 for _, loss in losses):
        values = _stacked(losses)
        nan, inf = torch.isnan(values), torch.isinf(values)
        flags = 2 * nan.long() + (inf & ~nan).long()
    else:
        flags = torch.stack([nonfinite_flag(loss) for _, loss in losses])
    steps = torch.tensor([step for step, _ in losses], device=flags.device)
    never = torch.iinfo(torch.long).max
    first = torch.where(flags > 0, steps, never).min()
    return flags.max(), torch.where(first == never, 0, first)


def host_flags(losses: list[tuple[int, torch.Tensor]]) -> tuple[int, int]:
    """:func:`pending_flags` for scalar CPU losses, read at once (one ``tolist``) and checked in Python, in
    their own dtype's values (promoted, never narrowed)."""
    values = _stacked(losses).tolist()
    flags = [2 if math.isnan(v) else 1 if math.isinf(v) else 0 for v in values]
    first = next((step for (step, _), f in zip(losses, flags, strict=True) if f), 0)
    return max(flags), first


def fold_flags(earlier: tuple[torch.Tensor, torch.Tensor] | None,
               later: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Two ``(worst flag, first bad step)`` pairs of consecutive intervals as one (device ops only)."""
    if earlier is None:
        return later
    return torch.maximum(earlier[0], later[0]), torch.where(earlier[1] > 0, earlier[1], later[1])
