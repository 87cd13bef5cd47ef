"""What configures the compile stack (``CompileSettings``), what Lightning hands its ``setup``
(``LightningSide``), and the base of every part of the stack (``StackComponent``)."""

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
from runner.torch_internals import observation
from runner.torch_internals.settings import TorchSettings


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


@dataclass
class LightningSide:
    """Lightning's side of ``CompileStack.setup``, handed over by the strategy."""

    device: torch.device
    optimizers: Callable[[], list[Optimizer]] = list  # as they will step (built after sharding under FSDP)
    accumulate_grad_batches: int = 1
    world_size: int = 1  # DDP/FSDP ranks: cudagraphs=auto stays off with several
    sample_batch: Callable[[], tuple[Any, str]] | None = None  # for the saved-activation measurement, or (None, why)
    step_context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext  # precision's
    shard: Callable[[nn.Module], None] | None = None  # FSDP; None where nothing is sharded
    scaler: bool = False  # a gradient scaler (16-mixed) steps the optimizer
    optimizer_lists: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # (obj.__dict__, name)
    module_optimizers: Callable[[], list[Any]] = list  # LightningModule.optimizers() as a list
    sink: Callable[[str], None] | None = None  # where compile progress prints (None: nowhere)
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str = "norm"
    # Hooks between backward and the update that may touch gradients: each keeps the step off the graph-safe path.
    gradient_hooks: list[str] = field(default_factory=list)


class StackComponent:
    """One part of the compile stack. Process-wide torch settings change only through ``self.torch_settings``,
    which ``teardown`` restores (Hydra multirun jobs share one process)."""

    name: str = "component"

    @property
    def torch_settings(self) -> TorchSettings:
        settings = vars(self).get("_torch_settings")
        if settings is None:
            settings = vars(self)["_torch_settings"] = TorchSettings()
        return settings

    def configure(self) -> None:
        """Set process-wide compiler configuration, once, before anything is compiled."""

    # The per-fit and per-step hooks; a part that does nothing there (a no-op stand-in) keeps these.
    def apply(self, module: nn.Module) -> None:
        pass

    def prepare_batch(self, batch: Any) -> Any:
        return batch

    def step_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def on_step_end(self, step: int) -> None:
        pass

    def listen(self, on_start: observation.CompileCallback, on_end: observation.CompileCallback | None = None) -> None:
        """Hear every compile's start (and end) until ``teardown``."""
        vars(self).setdefault("_listening", []).append(observation.COMPILE_EVENT_SOURCE.subscribe(on_start, on_end))

    def teardown(self) -> None:
        for unsubscribe in vars(self).pop("_listening", []):
            unsubscribe()
        self.torch_settings.restore()

    def figures(self) -> dict[str, Any]:
        return {}
