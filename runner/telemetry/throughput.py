"""Throughput, FLOPs per step (counted on one eager step, else 6 x parameters x tokens), MFU and peak memory."""

from __future__ import annotations

import contextlib
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from runner.data.batch import iter_tensors
from runner.data.preference.batch import PairInputs
from runner.data.sequences.padding import IGNORE_INDEX
from runner.packing import PackedInputs
from runner.telemetry.peak import Peak, mfu_figures


@dataclass(frozen=True)
class BatchCounts:
    """What one batch holds: rows, positions of its ``[batch, seq]`` ids, examples and targets in the loss (the
    last two 0-d tensors on the batch's device, so counting them waits for nothing)."""

    samples: int | None = None
    tokens: int | None = None
    examples: Any = None
    loss_tokens: Any = None


def batch_counts(batch: Any) -> BatchCounts:
    """The counts of a batch; examples and loss targets from ``(inputs, targets)`` batches whose targets are
    ``[batch, seq]`` ids with ``IGNORE_INDEX`` outside the loss (a preference batch's examples are its pairs)."""
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
    """Elements of the parameters that require grad (a walk over every parameter: once per epoch, not per log)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def estimate_flops(params: int, samples: int | None, tokens: int | None) -> float | None:
    """6 x trainable parameters x tokens (2 forward + 4 backward per parameter per token)."""
    count = tokens if tokens is not None else samples
    return 6.0 * params * count if count else None


class StepFlops:
    """FLOPs per step (counted on the meter's FLOP step, estimated until then) and the figures they give. The count
    runs between :meth:`start` and :meth:`stop`, two callback hooks, so ``FlopCounterMode`` is driven by hand."""

    def __init__(self) -> None:
        self._mode: Any = None
        self.total: int | None = None  # FLOPs of the counted step
        self.per_step: float | None = None
        self.per_unit: float | None = None
        self.source = "none"
        self._trainable: int | None = None  # trainable parameter count, recounted each epoch

    def recount(self) -> None:
        """Count the trainable parameters again at the next figures (finetuning callbacks, Lightning's
        ``BaseFinetuning``, freeze and unfreeze at epoch starts)."""
        self._trainable = None

    def start(self) -> None:
        """Eager steps only: under compiled code the counter would add a recompile and count nothing."""
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()

    def stop(self) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
            self.total = int(mode.get_total_flops())

    def counted(self, samples: int | None, tokens: int | None) -> None:
        """After the counted step (stopped), of ``samples`` and ``tokens``: its FLOPs from now on."""
        if self.total and (tokens or samples):
            self.per_step, self.source = float(self.total), "flop_counter"
            self.per_unit = self.per_step / float(tokens or samples or 1)

    def figures(self, module: torch.nn.Module | None, samples: int | None, tokens: int | None,
                rate: Callable[[str], float | None], peak: Peak | None) -> dict[str, Any]:
        """The FLOP figures of a step of ``samples`` and ``tokens``, and this rank's MFU against ``peak``."""
        per_unit, flops = self.per_unit, self.per_step
        if per_unit is None and module is not None:
            if self._trainable is None:
                self._trainable = trainable_parameters(module)
            flops, self.source = estimate_flops(self._trainable, samples, tokens), "6*params*tokens"
            per_unit = flops / float(tokens or samples or 1) if flops else None
        out: dict[str, Any] = {}
        if flops and per_unit:
            out["perf/tflop_per_step"] = flops / 1e12
            out["perf/flops_source"] = self.source
            unit_rate = rate("tokens") if tokens else rate("samples")
            if unit_rate:
                out.update(mfu_figures(per_unit * unit_rate, peak))
        return out


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory: CUDA max allocated, else the process's ``VmHWM`` (reset at the fit's start), else ``getrusage``."""
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.max_memory_allocated(device) / 2**30
    # The process's peak resident set in KiB from /proc/self/status, where there is one.
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is KiB on Linux and bytes on macOS.
    return rss / 2**30 if sys.platform == "darwin" else rss / 2**20
