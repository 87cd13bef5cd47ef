"""What the compile stack is configured by (:class:`CompileSettings`) and what the strategy hands it for
the ordered apply (:class:`LightningSide`): Lightning's side of the order, one callable or value each."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from runner.config.schema import CompileConfig, CudaGraphsConfig, DynamicConfig, OffloadConfig


@dataclass(frozen=True)
class CacheArtifacts:
    """torch's portable compile-cache artifacts of a fit (``reliability.save_cache_artifacts`` and
    ``reliability.load_cache_artifacts``): where the fit saves its own when it ends (None: not saved), and
    whose it loads before anything compiles (None: none)."""

    save_to: Path | None = None
    load_from: Path | None = None


@dataclass
class CompileSettings:
    """Everything the compile stack is configured by: the typed ``compile``, ``dynamic``,
    ``offload`` and ``cudagraphs`` config nodes, usable without Hydra, and the cache artifacts."""

    compile: CompileConfig = field(default_factory=CompileConfig)
    dynamic: DynamicConfig = field(default_factory=DynamicConfig)
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    cudagraphs: CudaGraphsConfig = field(default_factory=CudaGraphsConfig)
    artifacts: CacheArtifacts = field(default_factory=CacheArtifacts)


def _no_batch() -> tuple[Any, str]:
    return None, "no sample batch was given"


@dataclass
class LightningSide:
    """Lightning's side of ``CompileStack.setup``, handed over by the strategy."""

    device: torch.device
    optimizers: Callable[[], list[Optimizer]] = list
    """Step 5: the optimizers as they will step (Lightning's, or built after sharding under FSDP)."""
    accumulate_grad_batches: int = 1
    world_size: int = 1
    """Processes of the fit (DDP or FSDP ranks): ``cudagraphs=auto`` stays off with several."""
    sample_batch: Callable[[], tuple[Any, str]] = _no_batch
    """Step 0: one batch for the saved-activation measurement, or ``(None, why there is none)``."""
    step_context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    """The trainer's precision context around a training step (the measurement runs under it)."""
    shard: Callable[[nn.Module], None] | None = None
    """Step 4: shard the compiled module (FSDP); None where nothing is sharded."""
    scaler: bool = False
    """Whether a gradient scaler (``16-mixed``) steps the optimizer."""
    optimizer_lists: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    """``(obj.__dict__, name)`` of each list of optimizers a training step can reach through the trainer."""
    module_optimizers: Callable[[], list[Any]] = list
    """What ``LightningModule.optimizers()`` returns as a list (Lightning's ``LightningOptimizer`` wrappers)."""
    sink: Callable[[str], None] | None = None
    """Where compile progress and the end-of-fit line go (None: nowhere, e.g. runner's own runs)."""
    automatic_optimization: bool = True
    gradient_clip_val: float | None = None
    """``trainer.gradient_clip_val``: the clipping a graph-safe optimizer step takes over from Lightning."""
    gradient_clip_algorithm: str = "norm"
    """``trainer.gradient_clip_algorithm``: ``norm`` or ``value``."""
    gradient_hooks: list[str] = field(default_factory=list)
    """The module's and callbacks' hooks that run between backward and the update and may clip, read or replace
    gradients (``runner.stack.optimizer.graphed.gradient_hooks``): each keeps the step off the graph-safe path."""
