"""The torch internals only the shape policies touch, one function each, pinned by
``tests/test_dynamic.py::test_torch_internals_are_pinned`` so a torch upgrade breaks one test. What
the compiler did (graphs, recompile reasons, compile time) is read through
``runner.telemetry.torch_internals``, shared with the telemetry.
"""

from __future__ import annotations

import sys

import torch

# The prefix of the RuntimeError torch raises under set_stance("fail_on_recompile") (torch/_dynamo/eval_frame.py).
FAIL_ON_RECOMPILE_PREFIX = "Detected recompile when torch.compile stance is 'fail_on_recompile'"


def is_fail_on_recompile(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's refusal to recompile under the ``fail_on_recompile`` stance."""
    return isinstance(exc, RuntimeError) and str(exc).startswith(FAIL_ON_RECOMPILE_PREFIX)


def set_dynamo_flags(*, recompile_limit: int, specialize_float: bool, automatic_dynamic: bool,
                     compiler_collectives: bool) -> None:
    """The process-wide Dynamo settings a shape policy owns (set every time: they outlive a run)."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = recompile_limit
    dynamo_config.specialize_float = specialize_float
    dynamo_config.automatic_dynamic_shapes = automatic_dynamic
    dynamo_config.enable_compiler_collectives = compiler_collectives
    # Compiler collectives run only when every rank compiles at once; if one rank's guards fail and the
    # others' do not, it waits alone (a hang). Guard collectives make a miss on any rank a miss on all.
    torch.compiler.set_enable_guard_collectives(compiler_collectives)


def mark_dynamic(t: torch.Tensor, dim: int, min: int, max: int | None) -> None:
    """``mark_dynamic`` with bounds. torch 2.13 fails on a lower bound alone (``AssertionError: not
    simple sympy type <class 'NoneType'>`` in value_ranges), so "no upper bound" is passed as a huge int."""
    torch._dynamo.mark_dynamic(t, dim, min=min, max=sys.maxsize - 1 if max is None else max)


def mark_unbacked(t: torch.Tensor, dim: int, min: int, max: int | None, shape_id: str) -> None:
    """``mark_unbacked`` with bounds. A lower bound of at least 2 matters: without it causal SDPA
    cannot decide ``Eq(u0, 0)``, graph-breaks and falls back to eager (torch 2.13)."""
    torch._dynamo.decorators.mark_unbacked(t, dim, min=min, max=max, shape_id=shape_id)
