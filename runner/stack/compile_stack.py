"""``CompileStack``: the compile stack as one plain object, applied to a LightningModule. ``setup`` is the one
ordered apply for every strategy; each step pushes its undo, which ``teardown`` runs in reverse."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from torch.optim import Optimizer

from runner.config.decisions import stack as stack_rules
from runner.config.schema import OnError, OptimizerPolicy
from runner.lightning_step.binding import (
    code_of,
    install_step,
    reads_logged_results,
    takes_dataloader_iter,
    turn_off_hooks,
    user_step,
)
from runner.lightning_step.deferred_log import DeferredLog, metric_methods
from runner.stack.background import BackgroundCompile, NoBackground, build_background
from runner.stack.caches import LocalCompileCache, NoRemoteCache, RemoteCompileCache, build_remote_cache
from runner.stack.compiling.compile import CompiledModules, compiled_submodules
from runner.stack.compiling.plan import (
    CompilePlan,
    StepFacts,
    resolve_optimizers,
    resolve_plan,
    step_blocker,
    step_note,
)
from runner.stack.console import CompileConsole
from runner.stack.cudagraphs import CudaGraphs, CudaGraphsInactive, build_cudagraphs
from runner.stack.dynamic import ShapePolicyComponent, build_shape_policy
from runner.stack.errors.explain import CompileErrorWatch, explain_compile_error
from runner.stack.errors.storms import Storm, StormWatch
from runner.stack.offload import OffloadComponent, build_offload
from runner.stack.offload.component import excluded_inside_compiled
from runner.stack.offload.on_path import measure_saved_activations
from runner.stack.optimizer.graphed import Clipping
from runner.stack.optimizer.step import OptimizerStep
from runner.stack.python_state import PythonState
from runner.stack.settings import CacheArtifacts, CompileSettings, LightningSide, StackComponent
from runner.stack.step_mode import StepMode
from runner.torch_internals import runtime
from runner.torch_internals import settings as torch_settings

log = logging.getLogger(__name__)

@dataclass
class FitParts:
    """The plan and every part of one fit, built before anything is applied."""

    settings: CompileSettings
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
    remote_cache: RemoteCompileCache | NoRemoteCache = field(default_factory=NoRemoteCache)
    optimizer_step: OptimizerStep | None = None
    compiled_autograd: Any = None  # the compiler compiled autograd uses, where the plan has it

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cudagraphs/decision": self.plan.cudagraphs_decision.describe(),
                               "compile/mode": self.plan.kwargs.get("mode"),
                               "compile/options": dict(self.plan.kwargs.get("options", {})),
                               "compile/target": self.plan.target_name}
        if self.optimizer_step is not None:
            out.update(self.optimizer_step.figures())
        for part in (self.background, self.local_cache, self.remote_cache, self.errors, self.shape, self.state,
                     self.offload, self.cudagraphs, *([self.console] if self.console is not None else [])):
            out.update(part.figures())
        return out


class CompileStack:
    """Applies the compile stack to a LightningModule and runs each training step through it."""

    def __init__(self, settings: CompileSettings, console: bool = True) -> None:
        self.settings = settings
        self.console = console
        self.step_mode = StepMode()  # the one owner of Dynamo's stance in a fit (a new one at each setup)
        self.parts: FitParts | None = None
        self.compiled = CompiledModules()
        self.measured: dict[str, Any] = {}
        self.demoted: list[dict[str, Any]] = []
        self.steps = 0
        self.frames: int | None = None  # code objects this fit compiled (known at teardown)
        self._module: L.LightningModule | None = None
        self._step: Callable[..., Any] | None = None
        self._capture = False
        self._undo: list[Callable[[], None]] = []
        self._snapshot: runtime.CodeSnapshot = {}
        self._accumulate = 1
        self._micro_batches = 0
        self._optimizers: list[Optimizer] = []
        self._frozen: dict[str, Any] = {}
        self._applied = False

    @property
    def plan(self) -> Any:
        """The resolved ``CompilePlan`` (None before ``setup``)."""
        return self.parts.plan if self.parts is not None else None

    @property
    def backward_in_step(self) -> bool:
        """Whether the compiled step runs backward itself (``scope=step_backward``, automatic optimization)."""
        return self.plan is not None and self.plan.backward_in_step

    # -- setup: the ordered sequence -----------------------------------------------------------
    def setup(self, module: L.LightningModule, lightning: LightningSide) -> None:
        """Measure, transform the module in order, compile, shard, prepare the optimizers, bind."""
        self._snapshot = runtime.code_snapshot()
        self._applied = True  # from here on, teardown has something to undo
        self._accumulate = lightning.accumulate_grad_batches
        self.step_mode = StepMode()
        parts = self.parts = build_parts(self.settings, module, lightning, console=self.console,
                                         step_mode=self.step_mode)
        process = torch_settings.TorchSettings()  # the settings the compile config owns; restored last
        undo = self._undo = [process.restore, self.step_mode.close]

        def use(part: StackComponent) -> None:  # a part's process-wide configuration; its teardown undoes it
            part.configure()
            undo.append(part.teardown)

        # How the step is traced, before its first trace: loss.backward() into the graph for step_backward.
        process.dynamo("trace_autograd_ops", parts.plan.backward_in_step)
        self.measured = measure_saved_activations(module, lightning, self.settings, parts.plan)  # on a copy
        parts.background.apply(module)  # untransformed, for a compile process beside the run
        undo.append(parts.background.teardown)
        use(parts.local_cache)  # caches before anything compiles
        use(parts.remote_cache)
        # on_error=eager: a frame that fails to compile runs eagerly (counted by telemetry).
        process.dynamo("suppress_errors", self.settings.compile.on_error is OnError["eager"])
        # An int attribute of the module that changes: one recompile, not a storm.
        torch_settings.lift_python_scalars(process)
        use(parts.errors)
        if parts.console is not None:
            use(parts.console)
        use(parts.shape)  # 1. shape policy: dynamic-shape settings, batch marks
        use(parts.state)
        use(parts.offload)  # 2. saved activations: hooks or checkpoint wrappers, before compiling
        parts.offload.apply(module)
        parts.offload.measured = self.measured
        self._step = parts.background.compile_step(  # 3. compile (beside the run: at the switch)
            module, user_step(module), parts.plan, self.compiled, lightning.accumulate_grad_batches)
        undo.append(self.compiled.restore)
        if lightning.shard is not None:  # 4. shard (FSDP): compiled blocks become FSDP units
            lightning.shard(module)
        optimizers = lightning.optimizers()  # 5. the optimizers as they will step (sharded params under FSDP)
        facts = StepFacts(automatic_optimization=module.automatic_optimization, scaler=lightning.scaler,
                          sharded=lightning.shard is not None, gradient_hooks=tuple(lightning.gradient_hooks))
        plan = parts.plan = resolve_optimizers(parts.plan, self.settings.compile.optimizer, optimizers,
                                               lightning.device, facts=facts)
        # 6. the optimizer step the plan chose; a graph-safe one takes clipping over from Lightning.
        step = parts.optimizer_step = OptimizerStep(
            plan.optimizer, plan.optimizer_reason, plan.optimizer_kwargs, step_mode=self.step_mode,
            clipping=Clipping(lightning.gradient_clip_val, lightning.gradient_clip_algorithm),
            capture=plan.cudagraphs, blocker=plan.optimizer_blocker,
            asked_graphed=self.settings.compile.optimizer is OptimizerPolicy.graphed)
        for opt in optimizers:
            step.prepare(opt, lightning.device)
        undo.append(step.restore)
        use(parts.cudagraphs)  # 7. CUDA graphs: static addresses, step marking
        parts.cudagraphs.apply(module)
        parts.cudagraphs.bind_optimizers(optimizers)
        if plan.compiled_autograd:
            parts.compiled_autograd = torch.compile(**plan.compiled_autograd_kwargs)
        log.info("compile stack: scope=%s target=%s backend=%s optimizer=%s", plan.scope.value, plan.target_name,
                 plan.kwargs["backend"], plan.optimizer.value)
        self._bind(module, optimizers, lightning)  # 8. route training_step through the stack
        parts.background.configure()  # 9. compile beside the run: every step eager until it is ready

    def _bind(self, module: L.LightningModule, optimizers: list[Optimizer], lightning: LightningSide) -> None:
        assert self.parts is not None
        plan = self.parts.plan
        self._module, self._optimizers = module, optimizers
        # Python side effects are deferred only where the step itself is compiled: an eager step
        # (manual optimization, scope=model/blocks) logs exactly when and as Lightning does.
        self._capture = plan.whole_step
        self.parts.deferred.bind(module, metric_methods(module), detach_in_step=plan.backward_in_step,
                                 optimizer_lists=lightning.optimizer_lists,
                                 module_optimizers=lightning.module_optimizers)
        # Lightning zeroes gradients between training_step and backward. Here backward runs inside the step
        # (zeroing moves to just before it, same accumulation boundaries), or the graph-safe optimizer step
        # zeroes them in place after its update: set to None, they would move. The graph-safe step also clips
        # (trainer.gradient_clip_val): Lightning must not also clip.
        graphed = plan.optimizer is OptimizerPolicy.graphed
        self._undo.append(turn_off_hooks(module, zero_grad=plan.backward_in_step or graphed, clipping=graphed))
        self._undo.append(install_step(module, self.training_step))
        # Restored first: restoring is last-in, first-out across owners (two owners that raise one limit in
        # turn would otherwise leave the first one's value behind).
        bound = torch_settings.TorchSettings()
        self.parts.storms.start(bound)
        self._undo.append(bound.restore)

    def teardown(self) -> None:
        """Undo every transform in reverse and forget what this fit compiled (once per ``setup``: Lightning tears
        the strategy down after validate/test too, where nothing was applied)."""
        if self.parts is None or not self._applied:
            return
        self._applied = False
        parts = self.parts
        if self._module is not None and parts.console is not None:
            parts.console.say(parts.console.summary(self._summary_tail()))
        self._module, self._step = None, None
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        compiled = runtime.codes_compiled_since(self._snapshot)
        self.frames = len(compiled)
        if (message := self._nothing_compiled(self.frames, self._micro_batches)) is not None:
            log.warning(message)  # once, loudly: a fit that trained with something to compile compiled nothing
            if parts.console is not None:
                parts.console.say(message)
        runtime.forget_codes(compiled)

    # -- per step ------------------------------------------------------------------------------
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """One training step through every part's context, with deferred Python side effects."""
        assert self._module is not None and self._step is not None and self.parts is not None
        p = self.parts
        if args:  # each part's preparation of the device batch, in order
            batch = p.background.prepare_batch(args[0])  # first: the compile process sees the batch as given
            batch = p.shape.prepare_batch(batch)
            batch = p.offload.prepare_batch(batch)
            args = (p.cudagraphs.prepare_batch(batch), *args[1:])
        if self.backward_in_step and self._micro_batches % self._accumulate == 0:
            for opt in self._optimizers:
                opt.zero_grad(set_to_none=True)
        self._micro_batches += 1
        with (self.step_mode.training_step(),  # the stance the step's reasons give
              p.shape.step_context(),
              p.offload.step_context(),
              p.cudagraphs.step_context(),
              self._compiled_autograd(),
              p.deferred.capture(self._module) if self._capture else contextlib.nullcontext()):
            out = self._step(*args, **kwargs)
        if self.backward_in_step:  # the step ran backward
            p.cudagraphs.after_backward()
        for storm in p.storms.check():
            self.demote(storm)
        return p.deferred.resolve(out) if self._capture else out

    def _compiled_autograd(self) -> contextlib.AbstractContextManager[Any]:
        compiler = self.parts.compiled_autograd if self.parts is not None else None
        return runtime.compiled_autograd(compiler) if compiler is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def backward_context(self) -> Iterator[None]:
        """Around Lightning's backward of each training step (not taken when the step ran it)."""
        with self._compiled_autograd():
            yield
        if self.parts is not None:
            self.parts.cudagraphs.after_backward()

    def eval_step_context(self) -> contextlib.AbstractContextManager[Any]:
        """Around each validation/test/predict batch of a fit: under CUDA graphs, a new CUDA-graph step."""
        return self.parts.cudagraphs.eval_step_context() if self.parts is not None else contextlib.nullcontext()

    def optimizers_restored(self) -> None:
        """After a resume loaded the optimizers' state: the LR tensors a compiled optimizer step reads go back to
        the device."""
        if self.parts is not None and self.parts.optimizer_step is not None:
            self.parts.optimizer_step.after_restore()

    def skip_nonfinite_on_device(self, limit: int) -> Any:
        """Hand ``reliability.on_nonfinite=skip`` to the graph-safe optimizer step, if the fit has one (else None)."""
        step = self.parts.optimizer_step if self.parts is not None else None
        return step.skip_on_device(limit) if step is not None else None

    @contextlib.contextmanager
    def optimizer_step_context(self) -> Iterator[None]:
        """Around Lightning's optimizer step (closure included); counts the step after it."""
        yield
        self.steps += 1
        self.step_mode.optimizer_step_done()
        if (p := self.parts) is not None:
            p.background.on_step_end(self.steps)
            p.remote_cache.on_step_end(self.steps)
            p.shape.on_step_end(self.steps)
            p.cudagraphs.on_step_end(self.steps)
            for storm in p.storms.check():
                self.demote(storm)

    # -- demotion ----------------------------------------------------------------------------------
    def demote(self, storm: Storm) -> None:
        """Stop recompiling a storming frame: the whole step runs as compiled submodules, a compiled module or the
        optimizer step eagerly, any other frame eagerly until teardown."""
        assert self._module is not None and self.parts is not None
        module, parts, steps = self._module, self.parts, self.steps
        own = code_of(user_step(module))
        to = "eager"
        if own is not None and (storm.name, storm.firstlineno) == (own.co_name, own.co_firstlineno) and self._capture:
            # The training step is compiled whole (its Python side effects deferred): its submodules instead.
            self._step, self._capture, to = user_step(module), False, "compiled submodules"
            for m in compiled_submodules(module):
                self.compiled.compile(m, parts.plan.kwargs)
        elif (modules := [m for m in self.compiled.modules if type(m).forward.__code__.co_name == storm.name
                          and type(m).forward.__code__.co_firstlineno == storm.firstlineno]):
            self.compiled.restore(modules)
        elif storm.name == "step" and parts.optimizer_step is not None and parts.optimizer_step._prior:
            parts.optimizer_step.demote(steps)
        elif (code := runtime.find_code(storm.filename, storm.firstlineno, storm.name)) is not None:
            self._undo.append(runtime.run_code_eagerly(code))  # the skipped frame is put back at teardown
        message = (f"compile: {storm.frame} recompiled twice on the same guard `{storm.guard}`; runner stops "
                   f"recompiling it at step {steps} and runs it as {to} (reported as compile/demoted). "
                   "Make that value stable, a tensor, or read it outside the step to keep it compiled.")
        log.warning(message)
        if parts.console is not None:
            parts.console.say(message)
        self.demoted.append({"frame": storm.frame, "guard": storm.guard, "step": steps, "to": to})

    # -- a Trainer is pickled and deep-copied (Lightning's own tests, notebooks, tuners) ------------------
    def __getstate__(self) -> dict[str, Any]:
        """The settings and what the stack did (its figures, frozen); never the live fit, which a copy could not
        use."""
        return {"settings": self.settings, "console": self.console, "_frozen": self.figures()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state["console"])  # type: ignore[misc]
        self._frozen = state["_frozen"]

    # -- what it did ---------------------------------------------------------------------------
    def explain_compile_error(self, exc: BaseException) -> str | None:
        """One paragraph for a compile error raised during fit (None when it is not one)."""
        return explain_compile_error(exc, self.parts.errors if self.parts is not None else None)

    def _summary_tail(self) -> str:
        """The end-of-fit line's tail: the optimizer step, CUDA graphs and any demotion."""
        assert self.parts is not None
        p = self.parts
        text = f"optimizer step: {p.optimizer_step.describe() if p.optimizer_step else 'none'}"
        if isinstance(p.background, BackgroundCompile):
            text += f"; compile beside the run: {p.background.outcome}"
        if p.plan.cudagraphs:
            text += f"; {p.cudagraphs.summary()}"
        elif p.plan.cudagraphs_decision.worth_saying:
            text += f"; CUDA graphs off ({p.plan.cudagraphs_decision.reason})"
        if self.demoted:
            text += "; demoted: " + ", ".join(f"{d['frame']} -> {d['to']} at step {d['step']}" for d in self.demoted)
        return text

    def _nothing_compiled(self, frames: int, steps: int) -> str | None:
        """Why a fit that trained with something to compile compiled no frame (None: it compiled, or it was
        eager by design)."""
        assert self.parts is not None
        p = self.parts
        if frames or not steps or not p.plan.compiles or p.background.kept_eager:
            return None
        fallbacks = p.errors.fallbacks
        why = (f"every compiled frame fell back to eager ({fallbacks[0]['reason']})" if fallbacks else
               "Dynamo captured no frame of what was compiled (it skipped them, e.g. torch's skip rules)")
        return (f"runner compiled nothing in this fit (compile.scope={p.plan.scope.value}, {steps} training "
                f"steps): {why}. The steps ran eagerly; compile/frames is 0.")

    def figures(self) -> dict[str, Any]:
        """What the stack applied and did, for the report."""
        c = self.settings.compile
        out: dict[str, Any] = {"compile/scope": c.scope.value, "compile/backend": c.backend,
                               "compile/modules_compiled": self.compiled.total,
                               "compile/compiled_autograd": c.compiled_autograd,
                               "compile/demoted": list(self.demoted), "compile/demotions": len(self.demoted)}
        if self.frames is not None:
            out["compile/frames"] = self.frames
        # Without parts, an unpickled copy: what the original stack did.
        out.update(self.parts.figures() if self.parts is not None else self._frozen)
        return out


def stack_of(trainer: L.Trainer) -> CompileStack | None:
    """The compile stack of ``trainer``'s strategy (a runner strategy), or None: how a callback reaches it."""
    stack = getattr(trainer.strategy, "stack", None)
    return stack if isinstance(stack, CompileStack) else None


def build_parts(settings: CompileSettings, module: L.LightningModule, lightning: LightningSide, console: bool,
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
    # Which excluded modules run compiled matters only to a strategy whose hooks run eagerly (offload=cpu).
    inside = [] if s.offload.strategy.row.traced else excluded_inside_compiled(s.offload.exclude, module, plan)
    for problem in (stack_rules.cudagraphs_with_accumulation(plan.cudagraphs, lightning.accumulate_grad_batches),
                    stack_rules.compiled_optimizer_with_scaler(s.compile.optimizer, lightning.scaler),
                    stack_rules.offload_exclusions_lost(s.offload.strategy, s.offload.exclude,
                                                        device.type == "cuda", plan.target, inside)):
        if problem:
            raise ValueError(problem)
    cudagraphs = build_cudagraphs(plan.cudagraphs, s.cudagraphs, device, step_mode)
    blocker = step_blocker(module.automatic_optimization, pulls, reads)
    if (note := step_note(s.compile.scope, plan, blocker)) is not None:
        log.info(note)
    # compile.on_error=raise: no storm is ever reported; it runs into torch's recompile limit, which stops the run.
    storms = StormWatch(threshold=math.inf if s.compile.on_error is OnError["raise"] else 2)
    shown = CompileConsole(lightning.sink) if console and lightning.sink is not None else None
    background = build_background(s, plan, lightning, pulls, shown.say if shown else _quiet, step_mode)
    c = s.compile
    return FitParts(settings=s, plan=plan, errors=CompileErrorWatch(c.on_error),
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
