"""Wall time in Lightning's callback dispatch, for the per-step cost of runner's callbacks.

A step-time race cannot resolve a 1% cost here: two processes of the same contestant measured up to
4% apart (memory placement), and successive fits in one process up to 38% (a shared VM). Time spent
inside the callbacks is Python on the host, so it is timed directly: every callback hook Lightning
calls goes through ``lightning.pytorch.trainer.call._call_callback_hooks`` (every callback's every
hook, with Lightning's per-hook profiler context and attribute lookups), which this wraps in each
contestant's process. The callbacks of ``python -m runner`` do their work in hooks (their figures go to
``trainer.loggers`` from the hooks, not through ``self.log``, which Lightning would process after the
step) and register nothing per step elsewhere (their compile listeners fire only while compiling).
Their cost per step is then runner with them minus runner without them, both measured this way.
"""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch.trainer import call


class HookClock:
    """Seconds spent in ``_call_callback_hooks`` since ``install`` (``total``), waits included."""

    def __init__(self) -> None:
        self.total = 0.0
        self.depth = 0
        """Hooks running now (a contestant's tick inside a hook takes its turn wait out of ``total``)."""

    def install(self) -> HookClock:
        """Wrap Lightning's dispatch for the rest of this process (a contestant's own process)."""
        inner = call._call_callback_hooks

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            self.depth += 1
            try:
                return inner(*args, **kwargs)
            finally:
                self.depth -= 1
                self.total += time.perf_counter() - start

        call._call_callback_hooks = timed  # type: ignore[assignment]
        return self
