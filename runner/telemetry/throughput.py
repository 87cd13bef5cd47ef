"""Throughput, FLOPs, model FLOPs utilisation and peak memory.

MFU = achieved FLOP/s / device peak FLOP/s; the peak is measured on the run's device
(:mod:`runner.telemetry.peak`) unless ``TelemetryConfig.peak_tflops`` gives it. FLOPs per step are
counted by ``torch.utils.flop_counter.FlopCounterMode`` on one eager step (forward, backward and
optimizer), or estimated as 6 x parameters x tokens (samples when there is no sequence dim): :class:`StepFlops`
keeps which, and gives the telemetry's FLOP and MFU figures.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from runner.data.batch import iter_tensors
from runner.data.preference.batch import PairInputs
from runner.data.sequences.padding import IGNORE_INDEX
from runner.figures.perf import PERF_FLOPS_SOURCE, PERF_TFLOP_PER_STEP
from runner.packing import PackedInputs
from runner.telemetry.peak import Peak, mfu_figures


@dataclass(frozen=True)
class BatchCounts:
    """What one batch holds, for throughput. ``samples``: its rows (the first tensor's dim 0); ``tokens``: the
    positions of a ``[batch, seq]`` int tensor, padding included; ``examples``: the examples in it (a packed row holds
    several; a padded row with no target in the loss none); ``loss_tokens``: the targets in the loss. The last two are
    0-d tensors on the batch's device, summed when the figures are made: counting them waits for nothing."""

    samples: int | None = None
    tokens: int | None = None
    examples: Any = None
    loss_tokens: Any = None


def batch_counts(batch: Any) -> BatchCounts:
    """The counts of a batch (:class:`BatchCounts`). Examples and targets in the loss are counted for an
    ``(inputs, targets)`` batch whose targets are ``[batch, seq]`` ids, ``IGNORE_INDEX`` outside the loss (runner's
    causal-LM data, transformers' convention), its inputs ids or ``PackedInputs``; a preference batch's examples are
    its pairs (each two sequences, padded or packed); any other batch's examples are its rows."""
    tensors = list(iter_tensors(batch))
    if not tensors or tensors[0].dim() == 0:
        return BatchCounts()
    samples = int(tensors[0].shape[0])
    tokens = next((int(t.numel()) for t in tensors  # token ids [batch, seq]
                   if t.dim() == 2 and not t.is_floating_point() and not t.is_complex()), None)
    targets = batch[1] if isinstance(batch, (tuple, list)) and len(batch) == 2 else None
    if not (isinstance(targets, torch.Tensor) and targets.dim() == 2 and not targets.is_floating_point()):
        return BatchCounts(samples, tokens, samples)
    with torch.no_grad():
        counted = targets != IGNORE_INDEX
        inputs = batch[0]
        if isinstance(inputs, PairInputs):  # a pair is the example: its two sequences, wherever they lie
            examples = inputs.pairs.sum().long()
        elif isinstance(inputs, PackedInputs) and inputs.document_ids.shape == targets.shape:
            # An example of a packed row: a document of it with a target in the loss (the row's padding has none).
            docs = torch.zeros(targets.shape[0], targets.shape[1] + 1, dtype=torch.int32, device=targets.device)
            examples = (docs.scatter_add_(1, inputs.document_ids.long(), counted.int()) > 0).sum()
        else:
            examples = counted.any(dim=1).sum()
        return BatchCounts(samples, tokens, examples, counted.sum())


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


class StepFlops:
    """The FLOPs of a training step and of one unit of its work (a token, or a sample without a sequence dim):
    counted by ``counter`` on the one eager step the speedup meter gives it, until then estimated from the
    trainable parameters; and the figures they give (``perf/tflop_per_step``, ``perf/flops_source``, MFU)."""

    def __init__(self) -> None:
        self.counter = FlopCounter()
        self.per_step: float | None = None
        self.per_unit: float | None = None
        self.source = "none"
        self._trainable: int | None = None  # trainable parameter count, recounted each epoch

    def recount(self) -> None:
        """Count the trainable parameters again at the next figures (finetuning callbacks, Lightning's
        ``BaseFinetuning``, freeze and unfreeze at epoch starts)."""
        self._trainable = None

    def counted(self, samples: int | None, tokens: int | None) -> None:
        """After the counted step (``counter`` stopped), of ``samples`` and ``tokens``: its FLOPs from now on."""
        if self.counter.total and (tokens or samples):
            self.per_step, self.source = float(self.counter.total), "flop_counter"
            self.per_unit = self.per_step / float(tokens or samples or 1)

    def figures(self, module: torch.nn.Module | None, samples: int | None, tokens: int | None,
                rate: Callable[[str], float | None], peak: Peak | None) -> dict[str, Any]:
        """The FLOP figures of a step of ``samples`` and ``tokens`` (the latest batch's), and the MFU at
        ``rate("tokens")`` (``rate("samples")`` without tokens) against ``peak``: per rank, in the unit FLOPs
        were counted per, against this rank's device peak."""
        per_unit, flops = self.per_unit, self.per_step
        if per_unit is None and module is not None:
            if self._trainable is None:
                self._trainable = trainable_parameters(module)
            flops, self.source = estimate_flops(self._trainable, samples, tokens), "6*params*tokens"
            per_unit = flops / float(tokens or samples or 1) if flops else None
        out: dict[str, Any] = {}
        if flops and per_unit:
            out[PERF_TFLOP_PER_STEP] = flops / 1e12
            out[PERF_FLOPS_SOURCE] = self.source
            unit_rate = rate("tokens") if tokens else rate("samples")
            if unit_rate:
                out.update(mfu_figures(per_unit * unit_rate, peak))
        return out


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory: CUDA max allocated by tensors; CPU the process's max resident set size (``VmHWM`` on Linux,
    which ``runner.telemetry.peak.reset_memory_peak`` resets at the start of the fit; ``getrusage``'s may keep an
    earlier peak)."""
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.max_memory_allocated(device) / 2**30
    hwm = _vm_hwm_kib()
    if hwm is not None:
        return hwm / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is KiB on Linux and bytes on macOS.
    return rss / 2**30 if sys.platform == "darwin" else rss / 2**20


def _vm_hwm_kib() -> int | None:
    """The process's peak resident set in KiB from ``/proc/self/status`` (None where there is none)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
