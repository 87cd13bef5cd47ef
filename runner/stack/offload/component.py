"""The saved-activation strategy as a compile-stack component, and ``build_offload``.

The strategy calls ``configure()`` once, ``apply(model)`` once on the plain module before
compiling, and enters ``step_context()`` around every training step's forward and loss. Backward
may run after the context exits: packed tensors carry their own unpack hook (eager path) or the
unpack code is already inlined into the compiled backward (traced path).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import torch
from torch import nn

from runner import torch_internals as ti
from runner.config.schema import OffloadConfig
from runner.config.schema.options import Eagerly, Keeps
from runner.figures.offload import (
    OFFLOAD_ACTIVE,
    OFFLOAD_CHECKPOINT_MODE,
    OFFLOAD_CHECKPOINTED_BLOCKS,
    OFFLOAD_EAGER_PACKED,
    OFFLOAD_EAGER_SKIPPED,
    OFFLOAD_EXCLUDED_MODULES,
    OFFLOAD_MEASURE_PATH,
    OFFLOAD_MEMORY_BUDGET,
    OFFLOAD_OFFLOADED_BYTES_TOTAL,
    OFFLOAD_PATH,
    OFFLOAD_STRATEGY,
    OFFLOAD_TRACED_PACKED,
    OFFLOAD_TRACED_SKIPPED,
)
from runner.stack.compiling.plan import CompilePlan
from runner.stack.offload import policy
from runner.stack.offload.checkpointing import apply_checkpointing
from runner.stack.offload.hooks import SavedTensorCodec
from runner.stack.settings import StackComponent

CPU_OFFLOAD_ON_CPU = (
    "offload.strategy={strategy} moves saved activations to host memory, which is pointless on a {device} "
    "device: saved activations are kept as they are (acting as offload.strategy=none)."
)
_COUNTS = {"eager_packed": OFFLOAD_EAGER_PACKED, "eager_skipped": OFFLOAD_EAGER_SKIPPED,
           "traced_packed": OFFLOAD_TRACED_PACKED, "traced_skipped": OFFLOAD_TRACED_SKIPPED}
"""The hooks' own counts (``SavedTensorCodec.counts``), under their figures' keys."""


class OffloadComponent(StackComponent):
    """Base of every saved-activation strategy: a no-op that reports itself (strategy ``none``)."""

    name = "offload"
    path = "none"
    active = False

    def __init__(self, cfg: OffloadConfig, device: torch.device) -> None:
        self.cfg = cfg
        self.device = device
        self.steps = 0
        self.measured: dict[str, Any] = {}

    def current_path(self) -> str:
        return self.path

    def apply(self, module: nn.Module) -> None:
        pass

    def prepare_batch(self, batch: Any) -> Any:
        return batch

    def step_context(self) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def figures(self) -> dict[str, Any]:
        # The measured path (on the run's path, before training) wins over the live counts: a
        # compiled-graph cache hit packs without tracing the hooks, so live counts cannot see it.
        path = self.measured.get(OFFLOAD_MEASURE_PATH, self.current_path())
        out: dict[str, Any] = {
            OFFLOAD_STRATEGY: self.cfg.strategy.value,
            OFFLOAD_ACTIVE: self.active and path != "none",
            OFFLOAD_PATH: path,
        }
        out.update({k: v for k, v in self.measured.items() if k not in out})
        return out


class HookOffload(OffloadComponent):
    """bf16 / fp8: floating saved tensors stored narrow, restored to their dtype in backward."""

    active = True

    def __init__(self, cfg: OffloadConfig, device: torch.device) -> None:
        super().__init__(cfg, device)
        codec = cfg.strategy.row.codec
        assert codec is not None, "a strategy that keeps saved tensors encoded names its codec"
        self.codec = SavedTensorCodec(codec, cfg.min_bytes, tuple(cfg.exclude))

    def apply(self, module: nn.Module) -> None:
        self.codec.attach(module)

    def prepare_batch(self, batch: Any) -> Any:
        self.codec.hold(batch)
        return batch

    def step_context(self) -> ContextManager[Any]:
        self.steps += 1
        return _saved_tensor_hooks(self.codec.begin_step, self.codec.end_step, self.codec.pack_gm, self.codec.unpack_gm)

    def current_path(self) -> str:
        return self.codec.path(self.steps)

    def figures(self) -> dict[str, Any]:
        out = super().figures()
        out.update({_COUNTS[k]: v for k, v in sorted(self.codec.counts.items())})
        out[OFFLOAD_EXCLUDED_MODULES] = len(self.codec.excluded)
        return out


class CheckpointOffload(OffloadComponent):
    """Recompute instead of save: per-block checkpoints, or the compiler's memory budget."""

    active = True

    def __init__(self, cfg: OffloadConfig, device: torch.device, block_types: Sequence[str] = ()) -> None:
        super().__init__(cfg, device)
        self.block_types = tuple(block_types)
        self.wrapped: list[str] = []
        self.applied_budget: float | None = None

    @property
    def checkpointing(self) -> str:
        """How activations are recomputed: every block checkpointed (per_block), or the partitioner's memory budget."""
        return "per_block" if self.cfg.memory_budget is None else "memory_budget"

    def configure(self) -> None:
        """With ``memory_budget`` set: set the process-wide partitioner budget (``teardown`` undoes it).
        Dynamo does not guard on it: it must be set before the first compile."""
        if self.cfg.memory_budget is not None:
            self.torch_settings.functorch("activation_memory_budget", float(self.cfg.memory_budget))
            self.applied_budget = ti.memory_budget()  # as torch holds it while this run compiles

    def apply(self, module: nn.Module) -> None:
        if self.cfg.memory_budget is not None:
            return
        excluded = policy.excluded_module_names(module, self.cfg.exclude)
        self.wrapped = apply_checkpointing(module, self.block_types, excluded)
        if not self.wrapped:
            warnings.warn("offload.strategy=checkpoint found no repeated blocks to checkpoint "
                          "(no nn.ModuleList and no matching block_types): nothing is recomputed.",
                          stacklevel=2)

    def step_context(self) -> ContextManager[Any]:
        self.steps += 1
        return contextlib.nullcontext()

    def current_path(self) -> str:
        # The budget acts only on graphs AOTAutograd partitions: eagerly it saves nothing (the
        # measurement then reports path none).
        return "checkpoint_per_block" if self.cfg.memory_budget is None else "partitioner_budget"

    def figures(self) -> dict[str, Any]:
        out = super().figures()
        out[OFFLOAD_CHECKPOINT_MODE] = self.checkpointing
        out[OFFLOAD_CHECKPOINTED_BLOCKS] = len(self.wrapped)
        if self.cfg.memory_budget is not None:
            out[OFFLOAD_MEMORY_BUDGET] = self.applied_budget
        return out


class CudaOffload(OffloadComponent):
    """Saved activations in pinned host memory, copied on a side stream (CUDA)."""

    active = True
    path = "eager_hooks"  # stream and event calls cannot be traced: the hooks always run eagerly

    def __init__(self, cfg: OffloadConfig, device: torch.device) -> None:
        super().__init__(cfg, device)
        from runner.stack.offload.cuda_offload import PinnedOffloadHooks

        self.hooks = PinnedOffloadHooks(device, cfg.min_bytes)

    def current_path(self) -> str:
        # What happened, not what was configured: the hooks packed something, or nothing was offloaded.
        return self.path if self.hooks.offloaded_bytes else "none"

    def apply(self, module: nn.Module) -> None:
        self.hooks.held = policy.held_storages(module.parameters())
        self.hooks.excluded.attach(module, policy.excluded_module_names(module, self.cfg.exclude))

    def step_context(self) -> ContextManager[Any]:
        self.steps += 1
        return _saved_tensor_hooks(self.hooks.begin_step, self.hooks.end_step, self.hooks.pack, self.hooks.unpack)

    def figures(self) -> dict[str, Any]:
        out = super().figures()
        out[OFFLOAD_OFFLOADED_BYTES_TOTAL] = self.hooks.offloaded_bytes
        return out


@contextlib.contextmanager
def _saved_tensor_hooks(begin: Callable[[], None], end: Callable[[], None], pack: Any, unpack: Any) -> Iterator[None]:
    """One step under the strategy's saved-tensor hooks, with its per-step state begun and ended.
    Opened outside any compiled call: opened inside, it would break the graph and run eagerly."""
    begin()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield
    finally:
        end()


def excluded_inside_compiled(exclude: Sequence[str], module: nn.Module, plan: CompilePlan) -> list[str]:
    """The modules ``offload.exclude`` names in ``module`` that run inside compiled code under the plan: every
    one where the whole model runs compiled, those inside the blocks under ``scope=blocks``, none eagerly.
    (A strategy whose hooks run eagerly cannot honour those: ``runner.config.rules.stack.offload_exclusions_lost``.)"""
    eagerly = plan.target.row.eagerly
    if not exclude or eagerly is Eagerly.all:
        return []
    excluded = sorted(policy.excluded_module_names(module, exclude))
    if eagerly is Eagerly.none:
        return excluded
    blocks = [policy.clean_name(name) for name, _ in policy.find_blocks(module, plan.block_types)]
    return [n for n in excluded if any(n == b or n.startswith(b + ".") for b in blocks)]


_COMPONENTS: dict[Keeps, Callable[[OffloadConfig, torch.device], OffloadComponent]] = {
    Keeps.as_saved: OffloadComponent, Keeps.host_memory: CudaOffload, Keeps.encoded: HookOffload}
"""The component of each place a strategy keeps saved tensors (recomputing takes the blocks too)."""


def build_offload(cfg: OffloadConfig, device: torch.device, block_types: Sequence[str] = ()) -> OffloadComponent:
    """The component for ``cfg.strategy`` on ``device``.

    ``block_types`` (class names) selects the blocks for ``checkpoint``; empty uses the children of
    the largest ``nn.ModuleList``. ``cpu`` on a non-CUDA device warns once and returns the no-op.
    """
    device = torch.device(device)
    row = cfg.strategy.row
    if row.cuda_only and device.type != "cuda":
        # One line, at build time: configure/apply/step_context of the no-op stay silent.
        warnings.warn(CPU_OFFLOAD_ON_CPU.format(strategy=cfg.strategy.value, device=device.type), UserWarning,
                      stacklevel=2)
        return OffloadComponent(cfg, device)
    if row.keeps is Keeps.recomputed:
        return CheckpointOffload(cfg, device, block_types)
    return _COMPONENTS[row.keeps](cfg, device)
