"""CUDA graphs (``cudagraphs`` group): Inductor's CUDA-graph trees, ``mode="reduce-overhead"``."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from runner.config.schema import CudaGraphMode, CudaGraphsConfig
from runner.metrics import counted
from runner.stack.cudagraphs.partitions import PartitionCount
from runner.stack.cudagraphs.static_batch import StaticBatch
from runner.stack.settings import StackComponent
from runner.stack.step_mode import StepMode
from runner.torch_internals import observation, partitions, runtime


# Off CUDA, torch ignores every CUDA-graph option silently: runner says so once and records cudagraphs/active=False.
# On CUDA the first warmup_steps run eagerly (lazily built state exists before anything records); the trees then
# warm each compiled function up on its first call and record it on the next, so the first replay is at step
# warmup_steps + 3. Nothing may record again after that (docs/compile.md, "Record once, replay every step"):
# - one cudagraph_mark_step_begin per training step and per evaluation batch (else each evaluation batch records
#   another graph on top of the training step's live outputs);
# - the batch is copied into static buffers (StaticBatch): the backward saves it, and a saved input at a new
#   address re-records the backward graph;
# - parameters and, after the first step, optimizer state are marked static;
# - the optimizer step runs outside the tree (its own CUDAGraph, runner.stack.optimizer.graphed, or the fused
#   kernel): compiled, it would be a root of its own, copying every gradient into its inputs on each replay;
# - the logged loss is cloned out of the graph's output, so nothing of a replay is read after the next one.
# What happened is counted, not assumed: recordings, rerecordings (a graph recorded again in a later step), and
# replay_steps (steps whose forward and backward replayed and recorded nothing).
class CudaGraphs(StackComponent):
    """Marks step boundaries for CUDA-graph trees, keeps the batch, parameters and optimizer state at
    static addresses, and counts what really happened: recordings, re-recordings, replayed steps."""

    name = "cudagraphs"

    def __init__(self, cfg: CudaGraphsConfig, device: torch.device, step_mode: StepMode | None = None) -> None:
        self.cfg = cfg
        self.step_mode = step_mode or StepMode()
        self.device_index = device.index if device.index is not None else 0
        self.optimizers: list[Optimizer] = []
        self.static_state_tensors = 0
        self.batch = StaticBatch(device.type)
        self.partitions = PartitionCount()
        self.recordings = 0
        self.rerecordings = 0
        self.recording_steps = 0
        self.replay_steps = 0
        self._optimizer_steps = 0
        self._first_recorded: dict[str, int] = {}  # compile id -> the optimizer step it first recorded at
        self._recorded_in_step = 0
        self._state_after_backward: str | None = None

    def configure(self) -> None:
        # Each new size would record (and keep) another graph: leave the nodes that use a dynamic size out of
        # the graphs instead. torch before 2.15 counts every kernel's own loop indices as such sizes, which
        # left each Triton kernel of a static step out (docs/compile.md): the check is corrected there.
        self.torch_settings.inductor("triton.cudagraph_skip_dynamic_graphs", self.cfg.skip_dynamic_graphs)
        # The first warmup_steps run eagerly, so lazily built module state (caches, lazy modules) exists
        # before anything is recorded; their optimizer steps are not held (compiled from the first step).
        self.step_mode.eager_first_steps(self.cfg.warmup_steps)
        if self.cfg.skip_dynamic_graphs:
            partitions.partition_on_graph_symbols_only(self.torch_settings)
        self.partitions.install(self.torch_settings)
        self.listen(self._on_compile_start)

    def _on_compile_start(self, trigger: str, compile_id: str) -> None:
        if trigger == observation.CUDAGRAPH_RECORDING_TRIGGER:
            self.recordings += 1
            self._recorded_in_step += 1
            # A compiled graph's partitions share its compile id and record in the same step: only a
            # recording in a later step than the id's first is a re-recording.
            first = self._first_recorded.setdefault(compile_id, self._optimizer_steps)
            if first < self._optimizer_steps:
                self.rerecordings += 1

    def prepare_batch(self, batch: Any) -> Any:
        return self.batch(batch)

    def after_backward(self) -> None:
        # The step's own graphs end with its backward: what the tree did last, before the optimizer step.
        self._state_after_backward = observation.cudagraph_tree_state(self.device_index)

    def apply(self, module: nn.Module) -> None:
        # Parameters never move: telling the compiler lets CUDA graphs read them in place instead of
        # copying each into a static buffer every replay.
        for p in module.parameters():
            runtime.mark_static_address(p)

    def bind_optimizers(self, optimizers: list[Optimizer]) -> None:
        self.optimizers = list(optimizers)

    @contextlib.contextmanager
    def step_context(self) -> Iterator[None]:
        self._recorded_in_step = 0  # a first recording of an evaluation graph since the last step is not this step's
        torch.compiler.cudagraph_mark_step_begin()
        yield

    @contextlib.contextmanager
    def eval_step_context(self) -> Iterator[None]:
        """Around each validation/test/predict batch of the fit: a new CUDA-graph step (see the module
        docstring); the training step's outputs from before are not read again."""
        torch.compiler.cudagraph_mark_step_begin()
        yield

    def on_step_end(self, step: int) -> None:
        # Optimizer state (Adam's moments, step counters) is created by the first step. Its tensors are
        # updated in place and never move: marked static, a captured graph that reads them (a compiled
        # optimizer step) reads them in place instead of copying each into a static buffer every replay.
        if self.static_state_tensors == 0:
            for value in (v for opt in self.optimizers for state in opt.state.values() for v in state.values()):
                if isinstance(value, torch.Tensor):
                    runtime.mark_static_address(value)
                    self.static_state_tensors += 1
        if self._recorded_in_step:
            self.recording_steps += 1
        elif self._state_after_backward == "EXECUTION":
            self.replay_steps += 1
        self._optimizer_steps += 1
        self._recorded_in_step, self._state_after_backward = 0, None

    def teardown(self) -> None:
        self.batch.clear()  # the static buffers hold a batch's worth of device memory each
        super().teardown()

    def figures(self) -> dict[str, Any]:
        # Active only if graphs were recorded and then replayed: what happened, not what was asked.
        return {"cudagraphs/active": self.recordings > 0 and self.replay_steps > 0,
                "cudagraphs/requested": True, "cudagraphs/mode": self.cfg.mode.value,
                "cudagraphs/recordings": self.recordings, "cudagraphs/rerecordings": self.rerecordings,
                "cudagraphs/recording_steps": self.recording_steps, "cudagraphs/replay_steps": self.replay_steps,
                "cudagraphs/static_state_tensors": self.static_state_tensors,
                "cudagraphs/static_batch_copies": self.batch.copies,
                "cudagraphs/static_batch_passed_through": self.batch.passed_through,
                **self.partitions.figures()}

    def summary(self) -> str:
        """One clause for the end-of-fit line: partitions in CUDA graphs, recordings, replays, the first
        reason a part of the step stays eager, with its fix."""
        f = self.partitions.figures()
        parts = (f"{f['cudagraphs/partitions_graphed']} of {f['cudagraphs/partitions']} partitions graphed, "
                 if f else "")
        text = (f"CUDA graphs: {parts}{self.recordings} recorded ({self.rerecordings} again), "
                f"{counted(self.replay_steps, 'step')} replayed")
        if f.get("cudagraphs/eager_reasons"):
            first = f["cudagraphs/eager_reasons"][0]
            text += f"; eager: {first['nodes']} nodes for {first['reason']} (fix: {first['fix']})"
        return text


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

    def eval_step_context(self) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def bind_optimizers(self, optimizers: list[Optimizer]) -> None:
        pass

    def after_backward(self) -> None:
        pass

    def summary(self) -> str:
        return "CUDA graphs: not active"


def build_cudagraphs(on: bool, cfg: CudaGraphsConfig, device: torch.device,
                     step_mode: StepMode) -> CudaGraphs | CudaGraphsInactive:
    """The CUDA-graph component: active when the plan says so (``CompilePlan.cudagraphs``), else a no-op that
    says, when they were asked for, why they are not."""
    if on:
        return CudaGraphs(cfg, device, step_mode)
    return CudaGraphsInactive(cfg.mode is CudaGraphMode.reduce_overhead, device)
