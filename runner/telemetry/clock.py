"""``StepClock``: times training steps with the host clock, waiting for the device only when asked.

A CUDA device runs queued work asynchronously: the host clock around a step measures the launches
unless the host first waits for the device (``torch.cuda.synchronize``) before and after the step.
Each wait drains the launch queue, so waiting on every step would slow every step of a GPU run (and
under DDP on NCCL, stall the overlap of compute with the gradient all-reduce). The callback therefore
asks for a *timed* step only where a step time is used (see ``CompileTelemetry``): the speedup
meter's eager/compiled pairs and one sampled step per logging interval. Other steps are still
clocked on the host (a compile, seconds of host work, stays visible), but flagged untimed and left
out of every step-time figure.

On a synchronous device (the CPU) the host clock is exact without waiting: every step is timed and
nothing waits. ``wait`` is the seam tests use to count waits on a CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import torch


class StepClock:
    """Host-clock step timer for one device (see the module docstring).

    Args:
        device: the run's device (``trainer.strategy.root_device``).
        wait: blocks until the device has finished its queued work; by default
            ``torch.cuda.synchronize`` on a CUDA device and nothing on a synchronous one.
    """

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
