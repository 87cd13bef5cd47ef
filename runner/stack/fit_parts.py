"""The parts of one fit's compile stack, built from the settings before anything is applied: the plan
and every component, in the order ``CompileStack.setup`` applies them. Also the process-wide compiler
settings the ``compile`` group owns, and what the stack reports about them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from torch.optim import Optimizer

from runner import torch_internals as ti
from runner.config.decisions import stack as stack_rules
from runner.config.schema import OnError, OptimizerPolicy
from runner.figures.compile_plan import COMPILE_MODE, COMPILE_OPTIONS, COMPILE_TARGET
from runner.figures.cudagraphs import CUDAGRAPHS_DECISION
from runner.stack.background import BackgroundCompile, NoBackground, build_background
from runner.stack.caches import LocalCompileCache, build_remote_cache
from runner.stack.compiling.binding import reads_logged_results, takes_dataloader_iter, user_step
from runner.stack.compiling.plan import CompilePlan, resolve_plan, step_blocker, step_note
from runner.stack.component import StackComponent, overrides
from runner.stack.console import CompileConsole
from runner.stack.cudagraphs import CudaGraphs, CudaGraphsInactive, build_cudagraphs
from runner.stack.deferred.log import DeferredLog
from runner.stack.deferred.reads import PythonState
from runner.stack.dynamic import ShapePolicyComponent, build_shape_policy
from runner.stack.errors.explain import CompileErrorWatch
from runner.stack.errors.storms import StormWatch
from runner.stack.fit_inputs import CacheArtifacts, CompileSettings, LightningSide
from runner.stack.offload import OffloadComponent, build_offload
from runner.stack.offload.component import excluded_inside_compiled
from runner.stack.optimizer.graphed import Clipping
from runner.stack.optimizer.step import OptimizerStep
from runner.stack.step_mode import StepMode

log = logging.getLogger(__name__)

class _NoStorms(StormWatch):
    """``compile.on_error=raise``: a storm runs into torch's recompile limit, which stops the run."""

    def check(self) -> list[Any]:
        return []


Context = Callable[[], contextlib.AbstractContextManager[Any]]


@dataclass
class StepHooks:
    """The per-step hooks of one fit's components, only of those that override them (a disabled feature costs
    nothing in the hot loop), in the components' order."""

    preparers: list[Callable[[Any], Any]] = field(default_factory=list)
    """Each one's preparation of the device batch."""
    contexts: list[Context] = field(default_factory=list)
    """Entered around every training step."""
    optimizer_contexts: list[Context] = field(default_factory=list)
    """Entered around Lightning's optimizer step (closure included)."""
    step_enders: list[Callable[[int], None]] = field(default_factory=list)
    """Called with the optimizer steps so far, after each."""
    backward_enders: list[Callable[[], None]] = field(default_factory=list)
    """Called after each backward (in the step or in Lightning's)."""
    backward_context: Context = contextlib.nullcontext
    """Around Lightning's backward (compiled autograd, where the plan has it)."""


@dataclass
class FitParts:
    """Plan and components of one fit (see the module docstring)."""

    settings: CompileSettings
    step_mode: StepMode
    plan: CompilePlan
    errors: CompileErrorWatch
    shape: ShapePolicyComponent
    state: PythonState
    offload: OffloadComponent
    cudagraphs: CudaGraphs | CudaGraphsInactive
    console: CompileConsole | None
    storms: StormWatch
    background: BackgroundCompile | NoBackground
    deferred: DeferredLog = field(default_factory=DeferredLog)
    local_cache: LocalCompileCache = field(default_factory=lambda: LocalCompileCache(None, CacheArtifacts()))
    remote_cache: StackComponent = field(default_factory=StackComponent)
    optimizer_step: OptimizerStep | None = None
    _torch: ti.TorchSettings = field(default_factory=ti.TorchSettings)
    _bound: ti.TorchSettings = field(default_factory=ti.TorchSettings)

    @property
    def settings_owner(self) -> ti.TorchSettings:
        """The process-wide settings made once the components are configured (the storm watch's, at bind);
        ``teardown`` puts them back first: restoring is last-in, first-out across owners (two owners
        that raise one limit in turn would otherwise leave the first one's value behind)."""
        return self._bound

    @property
    def components(self) -> list[StackComponent]:
        """Every component, in application order (teardown runs them in reverse)."""
        # The compile process beside the run first: it sees each batch as the step receives it.
        comps: list[StackComponent] = [self.background, self.local_cache, self.remote_cache, self.errors, self.shape,
                                       self.state, self.offload, self.cudagraphs]
        return comps + ([self.console] if self.console is not None else [])

    def step_hooks(self) -> StepHooks:
        """The per-step hooks of the components (and compiled autograd's context, where the plan has it)."""
        comps = self.components
        hooks = StepHooks(
            preparers=[c.prepare_batch for c in comps if overrides(c, "prepare_batch")],
            contexts=[c.step_context for c in comps if overrides(c, "step_context")],
            optimizer_contexts=[c.optimizer_step_context for c in comps if overrides(c, "optimizer_step_context")],
            step_enders=[c.on_step_end for c in comps if overrides(c, "on_step_end")],
            backward_enders=[c.after_backward for c in comps if overrides(c, "after_backward")])
        if self.plan.compiled_autograd:
            compiler = torch.compile(**self.plan.compiled_autograd_kwargs)
            hooks.contexts.append(lambda: ti.compiled_autograd(compiler))
            hooks.backward_context = lambda: ti.compiled_autograd(compiler)
        return hooks

    def configure_tracing(self) -> None:
        """How the step is traced, set before its first trace (the saved-activation measurement's, step 0):
        ``loss.backward()`` into the step's graph for step_backward, and only then (restored by ``teardown``)."""
        self._torch.dynamo("trace_autograd_ops", self.plan.backward_in_step)

    def configure_compiler(self) -> None:
        """The process-wide settings the compile config owns (restored by ``teardown``), and the
        listeners that start before anything compiles."""
        c, t = self.settings.compile, self._torch
        self.local_cache.configure()  # compile.cache_dir and the artifacts loaded into it, before anything compiles
        self.remote_cache.configure()  # compile.cache: the shared cache, likewise
        # on_error=eager: a frame that fails to compile runs eagerly (counted by telemetry).
        t.dynamo("suppress_errors", c.on_error is OnError["eager"])
        ti.lift_python_scalars(t)  # an int attribute of the module that changes: one recompile, not a storm
        self.errors.configure()
        if self.console is not None:
            self.console.configure()

    def apply_optimizer_step(self, optimizers: list[Optimizer], device: torch.device,
                             clipping: Clipping | None = None) -> None:
        """6. The optimizer step the plan chose (fused kernel, compiled, graph-safe, or as configured); a graph-safe
        step takes ``clipping`` over from Lightning and is captured in a CUDA graph when CUDA graphs are on."""
        p = self.plan
        step = self.optimizer_step = OptimizerStep(
            p.optimizer, p.optimizer_reason, p.optimizer_kwargs, step_mode=self.step_mode,
            clipping=clipping or Clipping(), capture=p.cudagraphs, blocker=p.optimizer_blocker,
            asked_graphed=self.settings.compile.optimizer is OptimizerPolicy.graphed)
        for opt in optimizers:
            step.prepare(opt, device)

    def describe(self) -> str:
        p = self.plan
        return (f"scope={p.scope.value} target={p.target_name} backend={p.kwargs['backend']} "
                f"optimizer={p.optimizer.value}")

    def summary_extra(self, demoted: list[dict[str, Any]]) -> str:
        """The end-of-fit line's tail: the optimizer step, CUDA graphs and any demotion."""
        opt = self.optimizer_step.describe() if self.optimizer_step else "none"
        text = f"optimizer step: {opt}"
        if isinstance(self.background, BackgroundCompile):
            text += f"; compile beside the run: {self.background.outcome}"
        if self.plan.cudagraphs:
            text += f"; {self.cudagraphs.summary()}"
        elif self.plan.cudagraphs_decision.worth_saying:
            text += f"; CUDA graphs off ({self.plan.cudagraphs_decision.reason})"
        if demoted:
            text += "; demoted: " + ", ".join(f"{d['frame']} -> {d['to']} at step {d['step']}" for d in demoted)
        return text

    def nothing_compiled(self, frames: int, steps: int) -> str | None:
        """Why a fit that trained with something to compile compiled no frame (None: it compiled, or it
        was eager by design: nothing to compile, no step trained, or kept eager by the compile beside it)."""
        if frames or not steps or not self.plan.compiles or self.background.kept_eager:
            return None
        fallbacks = self.errors.fallbacks
        why = (f"every compiled frame fell back to eager ({fallbacks[0]['reason']})" if fallbacks else
               "Dynamo captured no frame of what was compiled (it skipped them, e.g. torch's skip rules)")
        return (f"runner compiled nothing in this fit (compile.scope={self.plan.scope.value}, {steps} training "
                f"steps): {why}. The steps ran eagerly; compile/frames is 0.")

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {CUDAGRAPHS_DECISION: self.plan.cudagraphs_decision.describe(),
                               COMPILE_MODE: self.plan.kwargs.get("mode"),
                               COMPILE_OPTIONS: dict(self.plan.kwargs.get("options", {})),
                               COMPILE_TARGET: self.plan.target_name}
        if self.optimizer_step is not None:
            out.update(self.optimizer_step.figures())
        for comp in self.components:
            out.update(comp.figures())
        return out

    def teardown(self) -> None:
        self._bound.restore()
        if self.optimizer_step is not None:
            self.optimizer_step.restore()
        for comp in reversed(self.components):
            comp.teardown()
        self.step_mode.close()
        self._torch.restore()


def build_fit_parts(settings: CompileSettings, module: L.LightningModule, lightning: LightningSide, console: bool,
                step_mode: StepMode) -> FitParts:
    """The plan and every component for ``module`` on ``lightning``'s device (nothing applied yet); the parts that
    need steps eager ask ``step_mode``."""
    s = settings
    device = lightning.device
    shape = build_shape_policy(s.dynamic, step_mode)
    offload = build_offload(s.offload, device, s.compile.block_types)
    step = user_step(module)
    pulls, reads = takes_dataloader_iter(step), reads_logged_results(module)
    facts = stack_rules.CudaGraphsFacts(
        on_cuda=device.type == "cuda", backend=s.compile.backend, compiles=s.compile.scope.row.compiles,
        compile_mode=s.compile.mode, shape=s.dynamic.policy, offload=s.offload.strategy,
        accumulate_grad_batches=lightning.accumulate_grad_batches, processes=lightning.world_size,
        sharded=lightning.shard is not None, free_memory=free_memory_share(device))
    plan = resolve_plan(s.compile, s.cudagraphs, shape.dynamic_arg, device,
                        automatic_optimization=module.automatic_optimization, pulls_batches=pulls,
                        reads_results=reads, facts=facts)
    log.info("CUDA graphs %s", plan.cudagraphs_decision.describe())
    # The rules the config check enforces too (runner.config.decisions.stack), here with what the fit found; refused
    # before the saved-activation measurement (setup's step 0) spends its compiles.
    offload_cfg = s.offload
    # Which excluded modules run compiled matters only to a strategy whose hooks run eagerly (offload=cpu).
    inside = [] if offload_cfg.strategy.row.traced else excluded_inside_compiled(offload_cfg.exclude, module, plan)
    for problem in (stack_rules.cudagraphs_with_accumulation(plan.cudagraphs, lightning.accumulate_grad_batches),
                    stack_rules.compiled_optimizer_with_scaler(s.compile.optimizer, lightning.scaler),
                    stack_rules.offload_exclusions_lost(offload_cfg.strategy, offload_cfg.exclude,
                                                        device.type == "cuda", plan.target, inside)):
        if problem:
            raise ValueError(problem)
    cudagraphs = build_cudagraphs(plan.cudagraphs, s.cudagraphs, device, step_mode)
    blocker = step_blocker(module.automatic_optimization, pulls, reads)
    if (note := step_note(s.compile.scope, plan, blocker)) is not None:
        log.info(note)
    storms = _NoStorms() if s.compile.on_error is OnError["raise"] else StormWatch()
    shown = CompileConsole(lightning.sink) if console and lightning.sink is not None else None
    background = build_background(s, plan, lightning, takes_dataloader_iter(step), shown.say if shown else _quiet,
                                  step_mode)
    c = s.compile
    return FitParts(settings=s, step_mode=step_mode, plan=plan, errors=CompileErrorWatch(c.on_error),
                    shape=shape, state=PythonState(step), offload=offload, cudagraphs=cudagraphs, console=shown,
                    storms=storms, background=background,
                    local_cache=LocalCompileCache(c.cache_dir, s.artifacts, c.cache_trust),
                    remote_cache=build_remote_cache(c.cache, device, c.cache_trust))


def free_memory_share(device: torch.device) -> float | None:
    """The share of a CUDA device's memory free now (what ``cudagraphs=auto`` wants headroom in); None elsewhere
    (and where CUDA is not there to ask: a plan resolved for a CUDA device on a CPU-only machine)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info(device)
    return free / total if total else None


def _quiet(message: str) -> None:
    """No console (runner's own runs): the component's log line is what the user sees."""
