"""A contestant's step clock and its turn-taking with the race's driver (``harness/race.py``, ``dpo.py``).

The standard library only: ``dpo.py``'s TRL contestant runs it in a virtual environment of its own, which has
neither Lightning nor runner.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Pacer:
    """Step clock and turn-taking for one contestant (see the module docstring).

    ``conn`` is the contestant process's end of a pipe to the driver: when its turn is over the
    contestant sends ``("done", None)`` and blocks until the driver sends the next turn's number of
    steps. Without a pipe (one contestant alone, as in ``harness.compile_cache.child``) it never waits.
    """

    conn: Any = None
    times: list[float] = field(default_factory=list)
    quota: int = 0
    left: int = 0
    last: float | None = None
    hooks: Any = None
    """A ``harness.hook_clock.HookClock``: then ``hook_times`` holds each step's time in callback hooks."""
    hook_times: list[float] = field(default_factory=list)
    waited: float = 0.0
    hook_mark: float = 0.0

    def tick(self) -> None:
        """Called by the contestant at the start of every step (from a callback hook, for the
        Lightning contestants: the time it waits for its turn is taken out of the hooks' time)."""
        now = time.perf_counter()
        if self.last is not None:
            self.times.append(now - self.last)
            self.left -= 1
            if self.hooks is not None:
                spent = self.hooks.total - self.waited
                self.hook_times.append(spent - self.hook_mark)
                self.hook_mark = spent
        if self.left <= 0 and self.conn is not None:
            self.conn.send(("done", None))
            self.left = self.quota = self.conn.recv()
            after = time.perf_counter()
            if self.hooks is not None and self.hooks.depth:  # the wait is inside a timed hook
                self.waited += after - now
            now = after
        self.last = now
