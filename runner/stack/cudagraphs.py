"""CUDA graphs (``cudagraphs`` group): Inductor's CUDA-graph trees, ``mode="reduce-overhead"``.

On a device other than CUDA, torch silently ignores every CUDA-graph option; runner says so once,
records ``cudagraphs/active=False``, and the run goes on.

On CUDA the first ``warmup_steps`` training steps run eagerly (lazily built module state exists before
anything is recorded); the compiled optimizer step is not held back: compiled from the first step, Dynamo
creates its state itself with ``capturable=True`` (``_set_capturable`` requires uninitialised state), so
it runs as a CUDA graph, where an eager first step would leave Adam non-capturable, stepping its
single-tensor path with a host sync per parameter (a tensor LR turns ``foreach`` off). Inductor's
CUDA-graph trees then warm each function up on its first compiled call and record it on the next, so
the first replay is at step ``warmup_steps + 3``. Validation, test and predict batches of the fit each
begin a new CUDA-graph step too: without the mark, every batch of a compiled submodule would record
another graph on top of the training step's live outputs.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from runner import torch_internals as ti
from runner.config.schema import CudaGraphMode, CudaGraphsConfig
from runner.stack.component import StackComponent


class CudaGraphs(StackComponent):
    """Marks step boundaries for CUDA-graph trees, keeps parameters and optimizer state at static
    addresses, and counts what really happened: graphs recorded, steps that replayed them."""

    name = "cudagraphs"

    def __init__(self, cfg: CudaGraphsConfig, device: torch.device) -> None:
        self.cfg = cfg
        self.device_index = device.index if device.index is not None else 0
        self.steps = 0
        self.optimizers: list[Optimizer] = []
        self.static_state_tensors = 0
        self.recordings = 0
        """CUDA graphs recorded (torch's CUDAGRAPH_RECORDING compile callbacks)."""
        self.replay_steps = 0
        """Steps after the warm-up whose last CUDA-graph tree action was a replay (``EXECUTION``)."""
        self._unregister: Any = None

    def configure(self) -> None:
        # Each new size would record (and keep) another graph: skip dynamic-shape graphs instead.
        self.torch_settings.inductor("triton.cudagraph_skip_dynamic_graphs", self.cfg.skip_dynamic_graphs)
        self._unregister = ti.register_compile_callbacks(self._on_compile_start, lambda trigger, cid: None)

    def _on_compile_start(self, trigger: str, compile_id: str) -> None:
        if trigger == ti.CUDAGRAPH_RECORDING_TRIGGER:
            self.recordings += 1

    def apply(self, module: nn.Module) -> None:
        # Parameters never move: telling the compiler lets CUDA graphs read them in place instead of
        # copying each into a static buffer every replay.
        for p in module.parameters():
            ti.mark_static_address(p)

    def bind_optimizers(self, optimizers: list[Optimizer]) -> None:
        self.optimizers = list(optimizers)

    @property
    def warming_up(self) -> bool:
        """Whether the next training step is one of the eager warm-up steps."""
        return self.steps < self.cfg.warmup_steps

    @contextlib.contextmanager
    def _step(self) -> Iterator[None]:
        # The first warmup_steps run eagerly, so lazily built module state (caches, lazy modules) exists
        # before anything is recorded. After that the stance is left alone: setting "default" would
        # cancel another component's (dynamic.after_warmup's fail_on_recompile). The optimizer step is
        # outside this context: compiled from the first step (see the module docstring).
        with ti.step_stance("force_eager") if self.warming_up else contextlib.nullcontext():
            torch.compiler.cudagraph_mark_step_begin()
            yield
        self.steps += 1

    def step_context(self) -> ContextManager[Any]:
        return self._step()

    @contextlib.contextmanager
    def _eval_step(self) -> Iterator[None]:
        torch.compiler.cudagraph_mark_step_begin()
        yield

    def eval_step_context(self) -> ContextManager[Any]:
        """Around each validation/test/predict batch of the fit: a new CUDA-graph step (see the module
        docstring); the training step's outputs from before are not read again."""
        return self._eval_step()

    def on_step_end(self, step: int) -> None:
        # Optimizer state (Adam's moments, step counters) is created by the first step. Its tensors are
        # updated in place and never move: marked static, a captured graph that reads them (a compiled
        # optimizer step) reads them in place instead of copying each into a static buffer every replay.
        if self.static_state_tensors == 0:
            self.static_state_tensors = mark_optimizer_state_static(self.optimizers)
        # Optimizer-only replays during the warm-up (its compiled step is not held back) are not replays of the step.
        if self.steps > self.cfg.warmup_steps and ti.cudagraph_tree_state(self.device_index) == "EXECUTION":
            self.replay_steps += 1

    def teardown(self) -> None:
        if self._unregister is not None:
            self._unregister()
            self._unregister = None
        super().teardown()

    def figures(self) -> dict[str, Any]:
        # Active only if graphs were recorded and then replayed: what happened, not what was asked.
        return {"cudagraphs/active": self.recordings > 0 and self.replay_steps > 0,
                "cudagraphs/requested": True, "cudagraphs/mode": self.cfg.mode.value,
                "cudagraphs/recordings": self.recordings, "cudagraphs/replay_steps": self.replay_steps,
                "cudagraphs/static_state_tensors": self.static_state_tensors}


def mark_optimizer_state_static(optimizers: list[Optimizer]) -> int:
    """Mark every tensor of the optimizers' state static-address; returns how many were marked."""
    marked = 0
    for opt in optimizers:
        for state in opt.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    ti.mark_static_address(value)
                    marked += 1
    return marked


class CudaGraphsInactive(StackComponent):
    """CUDA graphs requested on a device that has none: a no-op that reports it."""

    name = "cudagraphs"

    def __init__(self, requested: bool, device: torch.device) -> None:
        self.requested = requested
        if requested:
            warnings.warn(
                f"cudagraphs.mode=reduce_overhead needs a CUDA device; this run is on {device.type}, so CUDA "
                "graphs are not active (logged as cudagraphs/active=False). Use cudagraphs=disabled to "
                "silence this.",
                stacklevel=2,
            )

    def figures(self) -> dict[str, Any]:
        return {"cudagraphs/active": False, "cudagraphs/requested": self.requested}


def build_cudagraphs(cfg: CudaGraphsConfig, device: torch.device) -> StackComponent:
    """The CUDA-graph component for the device."""
    if cfg.mode is CudaGraphMode.reduce_overhead and device.type == "cuda":
        return CudaGraphs(cfg, device)
    return CudaGraphsInactive(cfg.mode is CudaGraphMode.reduce_overhead, device)
