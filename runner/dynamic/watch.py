"""What the compiler did, read from torch internals: each private name is used in one function here,
pinned by ``tests/test_dynamic.py::test_torch_internals_are_pinned``, so a torch upgrade breaks one test.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass

import torch

# The prefix of the RuntimeError torch raises under set_stance("fail_on_recompile") (torch/_dynamo/eval_frame.py).
FAIL_ON_RECOMPILE_PREFIX = "Detected recompile when torch.compile stance is 'fail_on_recompile'"
_METRICS_LIMIT = 4096


def graphs_compiled() -> int:
    """Dynamo graphs compiled in this process so far (every backend, forward frames)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def is_fail_on_recompile(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's refusal to recompile under the ``fail_on_recompile`` stance."""
    return isinstance(exc, RuntimeError) and str(exc).startswith(FAIL_ON_RECOMPILE_PREFIX)


def now_us() -> int:
    """Wall-clock microseconds, the clock of ``CompilationMetrics.start_time_us``."""
    return time.time_ns() // 1000


def keep_compilation_metrics() -> None:
    """torch keeps the last 64 compilation records; keep enough for a whole run's recompiles."""
    from torch._dynamo import utils

    if (utils._compilation_metrics.maxlen or 0) < _METRICS_LIMIT:
        utils.set_compilation_metrics_limit(_METRICS_LIMIT)


def recompile_reasons(since_us: int) -> list[str]:
    """The guard failures that caused each recompile started after ``since_us``, oldest first."""
    from torch._dynamo.utils import get_compilation_metrics

    return [m.recompile_reason for m in get_compilation_metrics()
            if m.recompile_reason and (m.start_time_us or 0) >= since_us]


@dataclass
class _CompileClock:
    """Total wall time spent compiling (Dynamo frames and deferred backward compiles), from torch's
    compile start/end callbacks. One per process: callbacks are registered once, never removed."""

    total_s: float = 0.0
    _start: float | None = None

    def on_start(self, *args: object) -> None:
        self._start = time.perf_counter()

    def on_end(self, *args: object) -> None:
        if self._start is not None:
            self.total_s += time.perf_counter() - self._start
            self._start = None


_clock: _CompileClock | None = None
_clock_lock = threading.Lock()


def compile_seconds() -> float:
    """Seconds spent compiling in this process since the first call (which starts the clock)."""
    global _clock
    with _clock_lock:
        if _clock is None:
            from torch._dynamo.callback import callback_handler

            _clock = _CompileClock()
            callback_handler.register_start_callback(_clock.on_start)
            callback_handler.register_end_callback(_clock.on_end)
        return _clock.total_s


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
