"""``CompileStack``: the compile stack as one plain object, applied to a LightningModule.

``setup`` is the one ordered apply, for every strategy (torchtitan's ``parallelize_llama`` is the
model: each transform one call, in order, readable top to bottom)::

    measure -> shape policy -> saved activations -> compile -> shard -> optimizers
      -> optimizer-step policy -> CUDA graphs -> bind -> compile beside the run (``compile.background``)

Lightning's side of the order (a sample batch, sharding, the optimizers) comes from the strategy as a
:class:`LightningSide`. What is compiled is decided once, up front, by
``runner.stack.compiling.plan.resolve_plan``. Each step then runs through ``training_step`` (batch preparation,
the components' contexts, deferred Python side effects), a recompile storm demotes the frame that storms
(``runner.stack.errors.storms`` finds it, ``runner.stack.demotion`` demotes it), and ``teardown`` restores every
module, optimizer and process-wide setting the stack changed and forgets what this fit compiled, so the next fit
in the process starts clean.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import lightning as L
from torch.optim import Optimizer

from runner import torch_internals as ti
from runner.config.schema import OptimizerPolicy
from runner.figures.compile_plan import (
    COMPILE_BACKEND,
    COMPILE_COMPILED_AUTOGRAD,
    COMPILE_MODULES_COMPILED,
    COMPILE_SCOPE,
)
from runner.figures.compile_work import COMPILE_DEMOTED, COMPILE_DEMOTIONS, COMPILE_FRAMES
from runner.stack.compiling.binding import install_step, turn_off_hooks, user_step
from runner.stack.compiling.compile import CompiledModules, apply_compile
from runner.stack.compiling.plan import StepFacts, resolve_optimizers
from runner.stack.deferred.metrics import metric_methods
from runner.stack.demotion import demote
from runner.stack.errors.explain import explain_compile_error
from runner.stack.errors.storms import Storm
from runner.stack.fit_inputs import CompileSettings, LightningSide
from runner.stack.fit_parts import FitParts, StepHooks, build_fit_parts
from runner.stack.offload.on_path import measure_saved_activations
from runner.stack.optimizer.graphed import Clipping
from runner.stack.step_mode import StepMode

log = logging.getLogger(__name__)

__all__ = ["CompileSettings", "CompileStack", "LightningSide", "stack_of"]


class CompileStack:
    """Applies the compile stack to a LightningModule and runs each training step through it."""

    def __init__(self, settings: CompileSettings, console: bool = True) -> None:
        self.settings = settings
        self.console = console
        self.step_mode = StepMode()
        """The one owner of Dynamo's stance in a fit (a new one at each ``setup``): parts and callbacks ask it
        for eager steps (``runner.stack.step_mode``)."""
        self.parts: FitParts | None = None
        self.compiled = CompiledModules()
        self.measured: dict[str, Any] = {}
        self.demoted: list[dict[str, Any]] = []
        self.steps = 0
        self._module: L.LightningModule | None = None
        self._step: Callable[..., Any] | None = None
        self._capture = False
        self._undo: list[Callable[[], None]] = []
        self._undo_step: Callable[[], None] = lambda: None
        self._snapshot: ti.CodeSnapshot = {}
        self._accumulate = 1
        self._micro_batches = 0
        self._optimizers: list[Optimizer] = []
        self._hooks = StepHooks()
        self._frozen: dict[str, Any] = {}
        self._applied = False
        self.frames: int | None = None
        """Code objects this fit compiled (known at teardown)."""

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
        self._snapshot = ti.code_snapshot()
        self._applied = True  # from here on, teardown has something to undo
        self._accumulate = lightning.accumulate_grad_batches
        self.step_mode = StepMode()
        parts = self.parts = build_fit_parts(self.settings, module, lightning, console=self.console,
                                             step_mode=self.step_mode)
        parts.configure_tracing()
        self.measured = measure_saved_activations(module, lightning, self.settings, parts.plan)  # 0. on a copy
        parts.background.apply(module)  # 0b. untransformed, for a compile process beside the run (compile.background)
        parts.configure_compiler()
        parts.shape.configure()  # 1. shape policy: Dynamo's dynamic-shape settings, batch marks, Lightning's counters
        parts.state.configure()
        parts.shape.apply(module)
        parts.offload.configure()  # 2. saved activations: hooks or checkpoint wrappers, before compiling
        parts.offload.apply(module)
        parts.offload.measured = self.measured
        self._step = parts.background.at_switch(lambda: apply_compile(  # 3. compile (beside the run: at the switch)
            module, user_step(module), parts.plan, self.compiled, lightning.accumulate_grad_batches), user_step(module))
        if lightning.shard is not None:  # 4. shard (FSDP): compiled blocks become FSDP units
            lightning.shard(module)
        optimizers = lightning.optimizers()  # 5. the optimizers as they will step (sharded params under FSDP)
        facts = StepFacts(automatic_optimization=module.automatic_optimization, scaler=lightning.scaler,
                          sharded=lightning.shard is not None, gradient_hooks=tuple(lightning.gradient_hooks))
        parts.plan = resolve_optimizers(parts.plan, self.settings.compile.optimizer, optimizers, lightning.device,  # 6.
                                        facts=facts)
        parts.apply_optimizer_step(optimizers, lightning.device,
                                   Clipping(lightning.gradient_clip_val, lightning.gradient_clip_algorithm))
        parts.cudagraphs.configure()  # 7. CUDA graphs: static addresses, step marking
        parts.cudagraphs.apply(module)
        parts.cudagraphs.bind_optimizers(optimizers)
        log.info("compile stack: %s", parts.describe())
        self._bind(module, optimizers, lightning)  # 8. route training_step through the stack
        parts.background.configure()  # 9. compile beside the run: every step eager until it is ready

    def _bind(self, module: L.LightningModule, optimizers: list[Optimizer], lightning: LightningSide) -> None:
        """Route every training_step call through the stack, with the components' per-step hooks."""
        assert self.parts is not None
        plan = self.parts.plan
        self._module, self._optimizers, self._hooks = module, optimizers, self.parts.step_hooks()
        # Python side effects are deferred only where the step itself is compiled: an eager step
        # (manual optimization, scope=model/blocks) logs exactly when and as Lightning does.
        self._capture = plan.whole_step
        self.parts.deferred.bind(module, metric_methods(module), detach_in_step=plan.backward_in_step,
                                 optimizer_lists=lightning.optimizer_lists,
                                 module_optimizers=lightning.module_optimizers)
        # Lightning zeroes gradients between training_step and backward. Here backward runs inside the step
        # (zeroing moves to just before it, same accumulation boundaries), or the graph-safe optimizer step
        # zeroes them in place after its update: set to None, they would move. The graph-safe step also clips
        # (trainer.gradient_clip_val): Lightning must not also clip. The strategy's call and DDP's forward
        # redirection both reach training_step.
        graphed = plan.optimizer is OptimizerPolicy.graphed
        undo_hooks = turn_off_hooks(module, zero_grad=plan.backward_in_step or graphed, clipping=graphed)
        self._undo_step = install_step(module, self.training_step)
        self._undo.append(undo_hooks)
        self.parts.storms.start(self.parts.settings_owner)

    def teardown(self) -> None:
        """Unpatch the module and optimizers, forget what this fit compiled, restore every setting (once per
        ``setup``: Lightning tears the strategy down after validate/test too, where nothing was applied)."""
        if self.parts is None or not self._applied:
            return
        self._applied = False
        if self._module is not None:
            self._undo_step()
            if self.parts is not None and self.parts.console is not None:
                self.parts.console.say(self.parts.console.summary(self.parts.summary_extra(self.demoted)))
        self._module, self._step = None, None
        self.compiled.restore()
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        self.parts.teardown()
        compiled = ti.codes_compiled_since(self._snapshot)
        self.frames = len(compiled)
        if (message := self.parts.nothing_compiled(self.frames, self._micro_batches)) is not None:
            log.warning(message)  # once, loudly: a fit that trained with something to compile compiled nothing
            if self.parts.console is not None:
                self.parts.console.say(message)
        ti.forget_codes(compiled)

    # -- per step ------------------------------------------------------------------------------
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """One training step through every component's context, with deferred Python side effects."""
        assert self._module is not None and self._step is not None and self.parts is not None
        if args and self._hooks.preparers:  # each component's preparation of the device batch, in order
            args = (functools.reduce(lambda batch, prepare: prepare(batch), self._hooks.preparers, args[0]), *args[1:])
        if self.backward_in_step and self._micro_batches % self._accumulate == 0:
            for opt in self._optimizers:
                opt.zero_grad(set_to_none=True)
        self._micro_batches += 1
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.step_mode.training_step())  # the stance the step's reasons give (StepMode)
            for context in self._hooks.contexts:
                stack.enter_context(context())
            if self._capture:
                stack.enter_context(self.parts.deferred.capture(self._module))
            out = self._step(*args, **kwargs)
        for backward_end in self._hooks.backward_enders if self.backward_in_step else ():  # the step ran backward
            backward_end()
        for storm in self.parts.storms.check():
            self._demote(storm)
        return self.parts.deferred.resolve(out) if self._capture else out

    @contextlib.contextmanager
    def backward_context(self) -> Iterator[None]:
        """Around Lightning's backward of each training step (not taken when the step ran it)."""
        with self._hooks.backward_context():
            yield
        for backward_end in self._hooks.backward_enders:
            backward_end()

    def eval_step_context(self) -> contextlib.AbstractContextManager[Any]:
        """Around each validation/test/predict batch of a fit: under CUDA graphs, a new CUDA-graph step."""
        return self.parts.cudagraphs.eval_step_context() if self.parts is not None else contextlib.nullcontext()

    def optimizers_restored(self) -> None:
        """After Lightning loaded the optimizers' state from a checkpoint (a resume): the LR tensors a
        compiled optimizer step reads go back to the device (``OptimizerStep.after_restore``)."""
        if self.parts is not None and self.parts.optimizer_step is not None:
            self.parts.optimizer_step.after_restore()

    def skip_nonfinite_on_device(self, limit: int) -> Any:
        """Hand ``reliability.on_nonfinite=skip`` to the graph-safe optimizer step, if the fit has one
        (``OptimizerStep.skip_on_device``); None where it has not."""
        step = self.parts.optimizer_step if self.parts is not None else None
        return step.skip_on_device(limit) if step is not None else None

    @contextlib.contextmanager
    def optimizer_step_context(self) -> Iterator[None]:
        """Around Lightning's optimizer step (closure included); counts the step after it."""
        with contextlib.ExitStack() as stack:
            for context in self._hooks.optimizer_contexts:
                stack.enter_context(context())
            yield
        self.steps += 1
        self.step_mode.optimizer_step_done()
        for step_end in self._hooks.step_enders:
            step_end(self.steps)
        if self.parts is not None:
            for storm in self.parts.storms.check():
                self._demote(storm)

    # -- demotion ----------------------------------------------------------------------------------
    def _demote(self, storm: Storm) -> None:
        """Stop recompiling a storming frame (``runner.stack.demotion``); the step or the undo it hands back."""
        assert self._module is not None and self.parts is not None
        done = demote(storm, self._module, self.parts, self.compiled, self.steps, whole_step=self._capture)
        if done.step is not None:
            self._step, self._capture = done.step, False
        if done.undo is not None:
            self._undo.append(done.undo)
        self.demoted.append(done.entry)

    # -- a Trainer is pickled and deep-copied (Lightning's own tests, notebooks, tuners) ------------------
    def __getstate__(self) -> dict[str, Any]:
        """The settings and what the stack did (its figures, frozen); never the live fit (compiled
        functions, torch callbacks, log handlers, the bound module), which a copy could not use."""
        return {"settings": self.settings, "console": self.console, "_frozen": self.figures()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state["console"])  # type: ignore[misc]
        self._frozen = state["_frozen"]

    # -- what it did ---------------------------------------------------------------------------
    def explain_compile_error(self, exc: BaseException) -> str | None:
        """One paragraph for a compile error raised during fit (None when it is not one)."""
        return explain_compile_error(exc, self.parts.errors if self.parts is not None else None)

    def figures(self) -> dict[str, Any]:
        """What the stack applied and did, for the report."""
        c = self.settings.compile
        out: dict[str, Any] = {COMPILE_SCOPE: c.scope.value, COMPILE_BACKEND: c.backend,
                               COMPILE_MODULES_COMPILED: self.compiled.total,
                               COMPILE_COMPILED_AUTOGRAD: c.compiled_autograd,
                               COMPILE_DEMOTED: list(self.demoted), COMPILE_DEMOTIONS: len(self.demoted)}
        if self.frames is not None:
            out[COMPILE_FRAMES] = self.frames
        # Without parts, an unpickled copy: what the original stack did.
        out.update(self.parts.figures() if self.parts is not None else self._frozen)
        return out


def stack_of(trainer: L.Trainer) -> CompileStack | None:
    """The compile stack of ``trainer``'s strategy (a runner strategy), or None: how a callback reaches it."""
    stack = getattr(trainer.strategy, "stack", None)
    return stack if isinstance(stack, CompileStack) else None
