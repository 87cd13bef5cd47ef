"""Throughput, FLOPs, model FLOPs utilisation and peak memory: small pure helpers.

MFU = achieved FLOP/s / device peak FLOP/s; the peak is measured on the run's device
(:mod:`runner.telemetry.peak`) unless ``TelemetryConfig.peak_tflops`` gives it. FLOPs per step are
counted by ``torch.utils.flop_counter.FlopCounterMode`` on one eager step (forward, backward and
optimizer), or estimated as 6 x parameters x tokens (samples when there is no sequence dim).
"""

from __future__ import annotations

import resource
import sys
from typing import Any

import torch

from runner.data.batch import iter_tensors


def batch_counts(batch: Any) -> tuple[int | None, int | None]:
    """(samples, tokens) of a batch: the first tensor's dim 0; tokens for a [batch, seq] int tensor."""
    tensors = list(iter_tensors(batch))
    if not tensors or tensors[0].dim() == 0:
        return None, None
    samples = int(tensors[0].shape[0])
    for t in tensors:
        if t.dim() == 2 and not t.is_floating_point() and not t.is_complex():
            return samples, int(t.numel())  # token ids [batch, seq]
    return samples, None


def trainable_parameters(module: torch.nn.Module) -> int:
    """Elements of the parameters that require grad. A walk over every parameter: count it once per
    epoch, not at every logging step (about 0.5 ms of each logging step on the 204 tensors of the
    benchmark MLP, 2026-11-23)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def estimate_flops(params: int, samples: int | None, tokens: int | None) -> float | None:
    """6 x trainable parameters x tokens (2 forward + 4 backward per parameter per token)."""
    count = tokens if tokens is not None else samples
    if not count:
        return None
    return 6.0 * params * count


class FlopCounter:
    """Counts FLOPs of everything between :meth:`start` and :meth:`stop` (one training step).

    Entered and exited from two different callback hooks, so it drives ``FlopCounterMode`` by hand.
    Run it on an eager step only: a dispatch mode active under compiled code would add a guard
    failure (a recompile) and count nothing inside the compiled graph.
    """

    def __init__(self) -> None:
        self._mode: Any = None
        self.total: int | None = None

    def start(self) -> None:
        """Begin counting."""
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()

    def stop(self) -> int | None:
        """Stop counting and return the FLOPs counted (None if not started)."""
        if self._mode is None:
            return self.total
        mode, self._mode = self._mode, None
        mode.__exit__(None, None, None)
        self.total = int(mode.get_total_flops())
        return self.total


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory: CUDA max allocated by tensors; CPU the process's max resident set size."""
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.max_memory_allocated(device) / 2**30
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is KiB on Linux and bytes on macOS.
    return rss / 2**30 if sys.platform == "darwin" else rss / 2**20
