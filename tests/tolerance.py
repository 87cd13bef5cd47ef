"""Tolerances for tests that compare two computations, sized to the computation instead of to one CPU.

Two float32 computations of the same math agree to the bit only when the same kernels run on the same inputs
(a copy, a reload, Dynamo's ``eager`` backend replaying the captured ops, one rank against another). Anything
else (the fused AdamW kernel against the graph-safe step, ``aot_eager``'s decompositions, Inductor, a padded
against an unpadded batch, another vector width of the same kernel) rounds differently, and by how much depends
on the CPU: its vector width (AVX2, AVX-512), its fused multiply-adds and the order its reductions take. A test
held to what one machine happened to show (``rtol=1e-6, atol=1e-7``) then fails on the next machine.

So a comparison of two different computations takes its tolerance from :func:`drift`: float32's epsilon times
how many roundings an element goes through per step (``depth``), times the steps the difference can grow over,
times the size of the values. Exact comparisons (``torch.equal``) stay where the kernels and inputs are the same;
a comment beside each says so. ``tests/test_tolerances.py`` fails on a tensor comparison with a tolerance below
what any float32 computation can promise across CPUs, or with none at all (``assert_close``'s defaults).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7: float32's unit in the last place at 1.0

# The floors below which no comparison of two different float32 computations is trustworthy on every CPU: one
# step of a handful of roundings (8 x eps ~ 1e-6 relative) at values of size 1 (and 1e-6 absolute near zero).
# tests/test_tolerances.py holds every literal tolerance in tests/ to them.
MIN_RTOL = 1e-5
MIN_ATOL = 1e-6


@dataclass(frozen=True)
class Tolerance:
    """``rtol`` and ``atol`` for ``torch.testing.assert_close`` (``**tol.kwargs``) or ``torch.allclose``."""

    rtol: float
    atol: float

    @property
    def kwargs(self) -> dict[str, float]:
        return {"rtol": self.rtol, "atol": self.atol}


def drift(steps: int, depth: int, magnitude: float = 1.0) -> Tolerance:
    """The tolerance for two float32 computations of the same math that round differently.

    ``steps``: how many times the difference can compound (training steps whose updates feed the next step's
    gradients; 1 for one forward or backward). ``depth``: the dependent roundings an element goes through in one
    step where the two sides differ: a chain of elementwise ops counts one each, a reduction over n terms
    ``log2(n)`` (a vectorised sum is a tree), an optimizer update about 8 (moments, square root, division, decay,
    the learning rate). ``magnitude``: the size of the values compared, for the absolute part near zero.

    Each rounding is off by at most one ``eps`` relative, and the worst case adds them up over steps:
    ``rtol = steps * depth * eps``, ``atol = rtol * magnitude`` (each no less than the floors above). That stays
    far below what a broken feature changes (a skipped clip, a missed update or a lost hook moves values by 1e-3 or
    more), so the comparison still fails when the feature breaks.
    """
    if steps < 1 or depth < 1 or magnitude <= 0:
        raise ValueError(f"drift(steps={steps}, depth={depth}, magnitude={magnitude}): each must be positive")
    bound = steps * depth * EPS32
    return Tolerance(rtol=max(bound, MIN_RTOL), atol=max(bound * magnitude, MIN_ATOL))
