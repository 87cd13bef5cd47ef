"""``StepClock``: times training steps with the host clock, waiting for the device only when asked.

Waiting on every CUDA step would drain the launch queue (and stall DDP's overlap of compute with the all-reduce),
so only steps whose time is used are timed; on the CPU every step is timed and nothing waits."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import torch


class StepClock:
    """Host-clock step timer; ``wait`` blocks until the device has finished its queued work (default
    ``torch.cuda.synchronize`` on CUDA, nothing on a synchronous device; tests count its calls)."""

    def __init__(self, device: torch.device, wait: Callable[[], None] | None = None) -> None:
        if wait is None and device.type == "cuda":
            wait = partial(torch.cuda.synchronize, device)
        self.device = device
        self.wait = wait
        self.waits = 0
        """How many times the clock waited for the device (two per timed step)."""
        self._t0: float | None = None
        self._timed = False

    @property
    def asynchronous(self) -> bool:
        """Whether the device queues work, so a step's host time is right only after a wait."""
        return self.wait is not None

    def _wait(self) -> None:
        if self.wait is not None:
            self.waits += 1
            self.wait()

    def start(self, timed: bool) -> None:
        """Start a step; ``timed``: its time will be used, so wait for earlier work first."""
        self._timed = timed or not self.asynchronous
        if timed:
            self._wait()
        self._t0 = time.perf_counter()

    def stop(self) -> tuple[float, bool]:
        """End the step: (milliseconds on the host clock, whether that is the step's real time)."""
        if self._t0 is None:
            raise RuntimeError("StepClock.stop() without start()")
        if self._timed and self.asynchronous:
            self._wait()
        ms = (time.perf_counter() - self._t0) * 1000.0
        self._t0 = None
        return ms, self._timed
