"""Throughput, FLOPs, model FLOPs utilisation and peak memory: small pure helpers.

MFU = achieved FLOP/s / device peak FLOP/s. The peak is ``TelemetryConfig.peak_tflops`` when set,
otherwise a default per device and precision (:func:`default_peak_tflops`). FLOPs per step are
counted by ``torch.utils.flop_counter.FlopCounterMode`` on one eager step (forward, backward and
optimizer), or estimated as 6 x parameters x tokens (samples when there is no sequence dim).
"""

from __future__ import annotations

import resource
import sys
from typing import Any

import torch

from runner.data.batch import iter_tensors

# Dense peak TFLOP/s by (device-name substring, precision). bf16/fp16 are tensor-core dense peaks;
# fp32 is the plain (non-TF32) peak, as Lightning's "32-true" does not enable TF32 by default.
_CUDA_PEAKS: tuple[tuple[str, float, float], ...] = (  # (name, bf16, fp32)
    ("H200", 989.0, 67.0),
    ("H100", 989.0, 67.0),
    ("A100", 312.0, 19.5),
    ("L40S", 362.0, 91.6),
    ("L4", 121.0, 30.3),
    ("A10", 125.0, 31.2),
    ("RTX 4090", 165.0, 82.6),
    ("RTX 3090", 71.0, 35.6),
    ("V100", 125.0, 15.7),
    ("T4", 65.0, 8.1),
)
# Measured on the project's 2-core Xeon (AVX-512 + AMX-BF16) with 2048^2 torch matmuls; see
# /work/shared/context/torch-compile-notes.md. Other CPUs differ: set telemetry.peak_tflops.
_CPU_PEAKS = {"bf16": 0.62, "fp32": 0.21}


def precision_kind(precision: str | None) -> str:
    """Lightning precision string (``32-true``, ``bf16-mixed``, ``16-mixed``...) -> bf16 | fp32."""
    text = str(precision or "32")
    return "bf16" if ("bf16" in text or text.startswith("16")) else "fp32"


def default_peak_tflops(device: torch.device, precision: str | None) -> float | None:
    """A sensible peak for MFU, or None when the device is unknown (MFU is then not reported)."""
    kind = precision_kind(precision)
    if device.type == "cpu":
        return _CPU_PEAKS[kind]
    if device.type == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(device)
        for key, bf16, fp32 in _CUDA_PEAKS:
            if key in name:
                return bf16 if kind == "bf16" else fp32
    return None


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


def estimate_flops(module: torch.nn.Module, samples: int | None, tokens: int | None) -> float | None:
    """6 x trainable parameters x tokens (2 forward + 4 backward per parameter per token)."""
    count = tokens if tokens is not None else samples
    if not count:
        return None
    params = sum(p.numel() for p in module.parameters() if p.requires_grad)
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


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so a host timer measures the work and not its launch."""
    if device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(device)
