"""The saved-activation strategy as a compile-stack component, and ``build_offload``."""


from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager
from typing import Any, Optional

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    CheckpointWrapper,
    checkpoint_wrapper,
)
from torch.utils.weak import WeakIdKeyDictionary

from runner.config.schema import OffloadConfig
from runner.config.schema.options import Eagerly, Keeps
from runner.stack.compiling.plan import CompilePlan
from runner.stack.offload import policy
from runner.stack.offload.hooks import SavedTensorCodec, compacted, restrided, stored_nbytes
from runner.stack.settings import StackComponent
from runner.torch_internals import runtime


def apply_checkpointing(
    model: nn.Module, block_types: Iterable[str] = (), exclude: frozenset[str] = frozenset()
) -> list[str]:
    """Wrap each repeated block of ``model`` in a non-reentrant checkpoint, in place."""
    wrapped: list[str] = []
    for name, block in policy.find_blocks(model, block_types):
        if policy.clean_name(name) in exclude or isinstance(block, CheckpointWrapper):
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        # preserve_rng_state keeps dropout masks identical between forward and recompute.
        setattr(parent, child, checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT))
        wrapped.append(name)
    return wrapped


class PinnedOffloadHooks:
    """Pack/unpack hooks that offload large floating saved tensors to pinned host memory."""

    def __init__(self, device: torch.device, min_bytes: int) -> None:
        if device.type != "cuda":
            raise ValueError(f"cpu offload needs a CUDA device, got {device}")
        self.device = device
        self.min_bytes = int(min_bytes)
        self.stream: Optional[torch.cuda.Stream] = None  # created lazily, on first use
        self.excluded = policy.ExcludedDepth()  # hooked on the excluded modules by the component
        self.held: set[int] = set()
        self.offloaded_bytes = 0
        self._dedupe: Optional[WeakIdKeyDictionary] = None

    def begin_step(self) -> None:
        self._dedupe = WeakIdKeyDictionary()

    def end_step(self) -> None:
        self._dedupe = None

    def pack(self, x: torch.Tensor) -> Any:
        """Start copying ``x`` to pinned host memory; return what unpack needs."""
        nbytes = stored_nbytes(x)
        base = x._base if x._base is not None else x
        if (
            x.device.type != "cuda"
            or not policy.wants_packing(x, nbytes, 0, self.min_bytes)
            or self.excluded.depth > 0
            or (base.is_leaf and base.requires_grad)
            or x.untyped_storage().data_ptr() in self.held
        ):
            return x
        if self._dedupe is not None and x in self._dedupe:
            return self._dedupe[x]
        if self.stream is None:
            self.stream = torch.cuda.Stream(device=x.device)
        compute = torch.cuda.current_stream(x.device)
        self.stream.wait_stream(compute)
        # An expanded view (stride 0) is copied at its real size and expanded again on unpack.
        compact, expanded = compacted(x.detach())
        with torch.cuda.stream(self.stream):
            # Stored contiguous (a strided view would pin its whole base); unpack re-strides.
            host = torch.empty(compact.size(), dtype=x.dtype, pin_memory=True)
            host.copy_(compact, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        x.record_stream(self.stream)
        self.offloaded_bytes += compact.numel() * compact.element_size()
        packed = (host, event, x.device, tuple(x.size()), tuple(compact.stride()), expanded)
        if self._dedupe is not None:
            self._dedupe[x] = packed
        return packed

    def unpack(self, packed: Any) -> torch.Tensor:
        """Bring a packed tensor back to the device, with its original size and stride."""
        if isinstance(packed, torch.Tensor):
            return packed
        host, event, device, size, stride, expanded = packed
        compute = torch.cuda.current_stream(device)
        compute.wait_event(event)  # the device-to-host copy must be complete before reading host
        # Pinned memory stays valid until the copy ends: the caching host allocator records the use.
        y = host.to(device, non_blocking=True)
        if tuple(y.stride()) != stride:
            y = restrided(y, tuple(host.size()), stride)
        return y.expand(size) if expanded else y


CPU_OFFLOAD_ON_CPU = (
    "offload.strategy={strategy} moves saved activations to host memory, which is pointless on a {device} "
    "device: saved activations are kept as they are (acting as offload.strategy=none)."
)
_COUNTS = {"eager_packed": "offload/eager_packed", "eager_skipped": "offload/eager_skipped",
           "traced_packed": "offload/traced_packed", "traced_skipped": "offload/traced_skipped"}


class OffloadComponent(StackComponent):
    """Base of every saved-activation strategy: a no-op that reports itself (strategy ``none``)."""

    name = "offload"
    path = "none"
    active = False

    def __init__(self, cfg: OffloadConfig, device: torch.device) -> None:
        self.cfg = cfg
        self.device = device
        self.measured: dict[str, Any] = {}

    def current_path(self) -> str:
        return self.path

    def figures(self) -> dict[str, Any]:
        # The measured path (on the run's path, before training) wins over the live counts: a
        # compiled-graph cache hit packs without tracing the hooks, so live counts cannot see it.
        path = self.measured.get("offload/measure_path", self.current_path())
        out: dict[str, Any] = {
            "offload/strategy": self.cfg.strategy.value,
            "offload/active": self.active and path != "none",
            "offload/path": path,
        }
        out.update({k: v for k, v in self.measured.items() if k not in out})
        return out


class HookOffload(OffloadComponent):
    """bf16 / fp8: floating saved tensors stored narrow, restored to their dtype in backward."""

    active = True

    def __init__(self, cfg: OffloadConfig, device: torch.device) -> None:
        super().__init__(cfg, device)
        self.steps = 0
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
        out["offload/excluded_modules"] = len(self.codec.excluded)
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
            self.applied_budget = runtime.memory_budget()  # as torch holds it while this run compiles

    def apply(self, module: nn.Module) -> None:
        if self.cfg.memory_budget is not None:
            return
        excluded = policy.excluded_module_names(module, self.cfg.exclude)
        self.wrapped = apply_checkpointing(module, self.block_types, excluded)
        if not self.wrapped:
            warnings.warn("offload.strategy=checkpoint found no repeated blocks to checkpoint "
                          "(no nn.ModuleList and no matching block_types): nothing is recomputed.",
                          stacklevel=2)

    def current_path(self) -> str:
        # The budget acts only on graphs AOTAutograd partitions: eagerly it saves nothing (the
        # measurement then reports path none).
        return "checkpoint_per_block" if self.cfg.memory_budget is None else "partitioner_budget"

    def figures(self) -> dict[str, Any]:
        out = super().figures()
        out["offload/checkpoint_mode"] = self.checkpointing
        out["offload/checkpointed_blocks"] = len(self.wrapped)
        if self.cfg.memory_budget is not None:
            out["offload/memory_budget"] = self.applied_budget
        return out


class CudaOffload(OffloadComponent):
    """Saved activations in pinned host memory, copied on a side stream (CUDA)."""

    active = True
    path = "eager_hooks"  # stream and event calls cannot be traced: the hooks always run eagerly

    def __init__(self, cfg: OffloadConfig, device: torch.device) -> None:
        super().__init__(cfg, device)
        self.hooks = PinnedOffloadHooks(device, cfg.min_bytes)

    def current_path(self) -> str:
        # What happened, not what was configured: the hooks packed something, or nothing was offloaded.
        return self.path if self.hooks.offloaded_bytes else "none"

    def apply(self, module: nn.Module) -> None:
        self.hooks.held = policy.held_storages(module.parameters())
        self.hooks.excluded.attach(module, policy.excluded_module_names(module, self.cfg.exclude))

    def step_context(self) -> ContextManager[Any]:
        return _saved_tensor_hooks(self.hooks.begin_step, self.hooks.end_step, self.hooks.pack, self.hooks.unpack)

    def figures(self) -> dict[str, Any]:
        out = super().figures()
        out["offload/offloaded_bytes_total"] = self.hooks.offloaded_bytes
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
    (A strategy whose hooks run eagerly cannot honour those: ``decisions.stack.offload_exclusions_lost``.)"""
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


def build_offload(cfg: OffloadConfig, device: torch.device, block_types: Sequence[str] = ()) -> OffloadComponent:
    """The component for ``cfg.strategy`` on ``device``."""
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
