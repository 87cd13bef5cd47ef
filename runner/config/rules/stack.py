"""The compile stack's rules that both the config check and the stack enforce, each written once: its condition
beside its message, in one function of plain values.

``runner.config.checks.stack`` calls each with what the config says, before anything runs (``python -m
runner``); the stack calls the same function with what it finds at fit time (a user's own ``Trainer``, where
no config check ran: the scaler Lightning built, the device, the model's module names). Each returns the
refusal in one paragraph (what, why, the fix) or None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runner.config.rules import gpu_defaults
from runner.config.schema import CudaGraphMode, OptimizerPolicy
from runner.config.schema.options import Eagerly, OffloadStrategy, Scope, ShapePolicy


def compiled_optimizer_with_scaler(policy: OptimizerPolicy, scaler: bool, name: str = "the optimizer's") -> str | None:
    """A compiled optimizer step cannot take part in a gradient scaler's unscale and inf/NaN skip."""
    if policy is not OptimizerPolicy.compiled or not scaler:
        return None
    return (f"compile.optimizer=compiled with a gradient scaler (trainer.precision=16-mixed): the scaler unscales "
            f"the gradients and skips steps with inf/NaN itself, which a compiled {name} step cannot take part in "
            "(torch would run it eagerly every step, Adam's single-tensor path with a host sync per parameter). "
            "Use compile.optimizer=auto (the fused kernel where there is one, which the scaler drives) or "
            "trainer.precision=bf16-mixed (no scaler).")


def cudagraphs_with_accumulation(cudagraphs: bool, accumulate_grad_batches: int) -> str | None:
    """Replaying the backward graph per micro-batch overwrites the gradients of the earlier ones."""
    if not cudagraphs or accumulate_grad_batches <= 1:
        return None
    return (f"cudagraphs=reduce_overhead with trainer.accumulate_grad_batches={accumulate_grad_batches}: each "
            "micro-batch replays the backward graph into the same static output buffers, so the gradients of "
            "earlier micro-batches are overwritten before the optimizer step (pytorch/pytorch#169545). Use "
            "trainer.accumulate_grad_batches=1 with a larger data.batch_size, or cudagraphs=disabled.")


def offload_exclusions_lost(strategy: OffloadStrategy, exclude: Sequence[str], on_cuda: bool, scope: Scope,
                            inside_compiled: Sequence[str] | None = None) -> str | None:
    """A strategy whose hooks run eagerly (``offload=cpu``) cannot honour ``offload.exclude`` for modules that run
    inside compiled code: there a saved tensor no longer tells which module saved it.

    ``inside_compiled``: the excluded modules that run compiled, where the model is known (the stack); None before
    it exists (the config check), where every name counts under a scope that compiles the whole model and none
    is decided yet under ``scope=blocks``."""
    row = strategy.row
    if row.traced or (row.cuda_only and not on_cuda) or not exclude or not scope.row.saves_across_graphs:
        return None
    if inside_compiled is None:
        inside_compiled = list(exclude) if scope.row.eagerly is Eagerly.none else []
    if not inside_compiled:
        return None
    return (f"offload={strategy.value} with offload.exclude={list(exclude)} under compile.scope={scope.value}: the "
            f"{strategy.value} strategy's hooks run eagerly on what each compiled forward saved, where a saved "
            f"tensor no longer tells which module saved it, so the exclusion of {', '.join(inside_compiled)} would "
            "be silently ignored (those activations offloaded too). Use offload.exclude=[] to offload everything, "
            "compile.scope=blocks (modules outside the blocks, such as the head, run eagerly and keep theirs), or "
            "offload=bf16 (its hooks are traced into the compiled graphs and honour offload.exclude).")


MIN_FREE_MEMORY = 0.25
"""The share of the device's memory ``cudagraphs=auto`` wants free before it turns CUDA graphs on: CUDA-graph trees
keep a memory pool of their own (static inputs, outputs, what a recorded forward saves for its backward) beside
the caching allocator, and an out-of-memory that eager would not hit is worse than a slower step."""


@dataclass(frozen=True)
class CudaGraphsFacts:
    """What decides ``cudagraphs=auto``: the config and, at fit time, what the stack found (plain values)."""

    on_cuda: bool
    backend: str = "inductor"
    compiles: bool = True
    """``compile.scope`` compiles something."""
    compile_mode: str | None = None
    shape: ShapePolicy = ShapePolicy.automatic
    offload: OffloadStrategy = OffloadStrategy.none
    accumulate_grad_batches: int = 1
    processes: int = 1
    """Processes of the run (DDP or FSDP ranks)."""
    sharded: bool = False
    """FSDP2 shards the parameters."""
    free_memory: float | None = None
    """The share of the device's memory free when the stack is applied (None: not measured, the config check)."""


@dataclass(frozen=True)
class CudaGraphsDecision:
    """Whether the run captures CUDA graphs, and why (``cudagraphs/decision`` in the report)."""

    on: bool
    reason: str
    worth_saying: bool = True
    """Whether the end-of-fit line says it when off: not for ``disabled``, nor for ``auto`` on a CPU (where
    nothing changes); the report's ``cudagraphs/decision`` always does."""

    def describe(self) -> str:
        return f"{'on' if self.on else 'off'}: {self.reason}"


def cudagraphs_decision(mode: CudaGraphMode, facts: CudaGraphsFacts) -> CudaGraphsDecision:
    """Whether CUDA graphs are on, with the reason: ``disabled`` never, ``reduce_overhead`` on every CUDA device
    (what cannot work beside it is refused before the run by the config check), and ``auto`` only where the
    step is eligible, each condition below with its reason. ``auto`` is conservative on purpose: runner's
    defaults are never worse than what it wraps, so it turns CUDA graphs on only where they are known to hold."""
    if mode is CudaGraphMode.disabled:
        return CudaGraphsDecision(False, "cudagraphs=disabled", worth_saying=False)
    asked = f"cudagraphs={mode.value}"
    if not facts.on_cuda:
        return CudaGraphsDecision(False, f"{asked}: no CUDA device", worth_saying=mode is CudaGraphMode.reduce_overhead)
    if mode is CudaGraphMode.reduce_overhead:
        return CudaGraphsDecision(True, f"{asked}: asked for")
    why = _auto_blocker(facts)
    if why is not None:
        return CudaGraphsDecision(False, f"{asked}: {why}")
    free = "" if facts.free_memory is None else f", {facts.free_memory:.0%} of the device's memory free"
    return CudaGraphsDecision(True, (f"{asked}: the step is eligible (compile.backend=inductor, "
                                     f"dynamic.policy={facts.shape.value}, no CPU offload, no accumulation, "
                                     f"one process{free})"))


def _auto_blocker(f: CudaGraphsFacts) -> str | None:
    """Why ``cudagraphs=auto`` leaves CUDA graphs off on a CUDA device (None: nothing does)."""
    if not gpu_defaults.CUDAGRAPHS_AUTO:
        return ("the GPU rows measured CUDA graphs slower than none (runner.config.rules.gpu_defaults, docs/gpu.md); "
                "cudagraphs=reduce_overhead still turns them on")
    if not f.compiles:
        return "nothing is compiled (compile.scope=none), and CUDA graphs record compiled graphs"
    if f.backend != "inductor":
        return f"compile.backend={f.backend}: CUDA-graph trees are Inductor's"
    if f.compile_mode is not None:
        return f"compile.mode={f.compile_mode} is set, and auto leaves a chosen mode as it is"
    if f.shape.row.compile_dynamic is not False:
        return (f"dynamic.policy={f.shape.value}: shapes may vary, and a CUDA graph records one size (auto turns "
                "them on with dynamic=static or dynamic=bucket)")
    if not f.offload.row.cudagraphs:
        return f"offload={f.offload.value}: its eager stream and event calls cannot be captured"
    if f.accumulate_grad_batches > 1:
        return (f"trainer.accumulate_grad_batches={f.accumulate_grad_batches}: a replayed backward overwrites the "
                "gradients of the earlier micro-batches (pytorch/pytorch#169545)")
    if f.sharded:
        return "FSDP2 gathers and frees parameters outside the graphs: no static addresses to record"
    if f.processes > 1:
        return f"{f.processes} processes (DDP): not yet measured under CUDA graphs in runner"
    if f.free_memory is not None and f.free_memory < MIN_FREE_MEMORY:
        return (f"{f.free_memory:.0%} of the device's memory is free, under the {MIN_FREE_MEMORY:.0%} auto wants "
                "(CUDA-graph trees keep a memory pool of their own)")
    return None
