"""``perf/host_ms_per_step`` and ``perf/device_busy`` on CUDA: the host time of the compiled steps not waited for
(what launching their work costs), and the share of one profiled window of steps the device is busy."""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any

import torch

from runner.torch_internals import observation

START_AFTER = 30  # Steps before the device-busy window opens.
WINDOW_STEPS = 5  # Compiled steps the window profiles.


def busy_share(intervals: list[tuple[float, float]], wall: float) -> float | None:
    """The share of ``wall`` covered by the union of ``intervals`` (same unit); None for no wall time. Kernels on
    several streams overlap: each instant counts once."""
    if wall <= 0:
        return None
    busy, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return min(1.0, busy / wall)


class NoHostDevice:
    """Off a CUDA device: nothing measured, no figures (:class:`HostDevice` on CUDA)."""

    def step_start(self, step: int, mode: str) -> None:
        pass

    def step_end(self, ms: float, timed: bool, compiled: bool) -> None:
        pass

    def close(self) -> None:
        pass

    def figures(self) -> dict[str, Any]:
        return {}


class HostDevice(NoHostDevice):
    """On CUDA: the host time of the steps not waited for, and one profiled window (see the module docstring)."""

    def __init__(self, device: torch.device, start_after: int = START_AFTER) -> None:
        self.device = device
        self.start_after = start_after
        self._host_ms: deque[float] = deque(maxlen=1000)
        self._prof: Any = None
        self._t0 = 0.0
        self._steps: list[int] = []
        self._busy: float | None = None
        self._in_window = False

    def step_start(self, step: int, mode: str) -> None:
        """Open the window at the first compiled step after ``start_after`` (once)."""
        self._in_window = self._prof is not None
        if self._prof is None and self._busy is None and not self._steps and step >= self.start_after \
                and mode == "compiled":
            torch.cuda.synchronize(self.device)
            self._prof, self._t0, self._in_window = observation.cuda_kernel_profiler(), time.perf_counter(), True
        if self._in_window:
            self._steps.append(step)

    def step_end(self, ms: float, timed: bool, compiled: bool) -> None:
        """Keep the host time of a compiled step not waited for (the window's own steps wait at its ends)."""
        if compiled and not timed and not self._in_window:
            self._host_ms.append(ms)
        if self._prof is not None and len(self._steps) >= WINDOW_STEPS:
            torch.cuda.synchronize(self.device)
            wall_us = (time.perf_counter() - self._t0) * 1e6
            prof, self._prof = self._prof, None
            prof.stop()
            self._busy = busy_share(observation.kernel_intervals(prof), wall_us)

    def close(self) -> None:
        """Stop a window the run ended in (not reported: it did not hold ``WINDOW_STEPS`` steps)."""
        if self._prof is not None:
            self._prof.stop()
            self._prof = None

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self._host_ms:
            out["perf/host_ms_per_step"] = statistics.median(self._host_ms)
        if self._busy is not None:
            out["perf/device_busy"], out["perf/device_busy_steps"] = self._busy, list(self._steps)
        return out


def build_host_device(device: torch.device) -> HostDevice | NoHostDevice:
    return HostDevice(device) if device.type == "cuda" else NoHostDevice()
