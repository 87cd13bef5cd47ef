"""``CompileStack``: the compile stack as one plain object, applied to a LightningModule.

``setup`` applies the transforms in one ordered sequence (torchtitan's ``parallelize_llama`` is the
model: each transform one call, in order):

    shape policy -> saved-activation strategy -> compile -> optimizer step -> CUDA graphs

What is compiled is decided once, up front, by ``runner.stack.plan.resolve_plan``. Each step then
runs through ``training_step`` (batch preparation, the components' contexts, deferred logging), and
``teardown`` restores every process-wide setting the stack changed. The Lightning strategies hold one
``CompileStack`` and delegate to it; it holds no Lightning state beyond the module it patches, so it
is testable on its own.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from torch.optim import Optimizer

from runner import torch_internals as ti
from runner.config.checks_stack import cudagraphs_accumulation_error
from runner.config.schema import (
    CompileConfig,
    CudaGraphsConfig,
    DynamicConfig,
    OffloadConfig,
    OffloadStrategy,
    OnError,
)
from runner.stack.compile import apply_compile
from runner.stack.compile_errors import CompileErrorWatch, explain_compile_error
from runner.stack.component import StackComponent, overrides
from runner.stack.cudagraphs import CudaGraphs, build_cudagraphs
from runner.stack.deferred_log import DeferredLog
from runner.stack.dynamic import ShapePolicyComponent, build_shape_policy
from runner.stack.metrics import metric_methods
from runner.stack.offload import OffloadComponent, build_offload
from runner.stack.offload_on_path import measure_on_run_path
from runner.stack.optimizer_step import OptimizerStep
from runner.stack.plan import CompilePlan, manual_optimization_note, resolve_optimizers, resolve_plan
from runner.stack.python_state import PythonState

log = logging.getLogger(__name__)

_CACHE_DIR_ENV = "TORCHINDUCTOR_CACHE_DIR"


@dataclass
class CompileSettings:
    """Everything the compile stack is configured by: the typed ``compile``, ``dynamic``,
    ``offload`` and ``cudagraphs`` config nodes, usable without Hydra."""

    compile: CompileConfig = field(default_factory=CompileConfig)
    dynamic: DynamicConfig = field(default_factory=DynamicConfig)
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    cudagraphs: CudaGraphsConfig = field(default_factory=CudaGraphsConfig)


def _skip_zero_grad(*args: Any, **kwargs: Any) -> None:
    """Stands in for ``LightningModule.optimizer_zero_grad`` when the step zeroes gradients itself."""


class CompileStack:
    """Applies the compile stack to a LightningModule and runs each training step through it."""

    def __init__(self, settings: CompileSettings) -> None:
        self.settings = settings
        self.deferred_log = DeferredLog()
        self.plan: CompilePlan | None = None
        self.components: list[StackComponent] = []
        self.errors = CompileErrorWatch(settings.compile.on_error)
        self.optimizer_step_policy: OptimizerStep | None = None
        self.offload_measured: dict[str, Any] = {}
        self.modules_compiled = 0
        self.steps = 0
        self._torch = ti.TorchSettings()
        self._module: L.LightningModule | None = None
        self._step: Callable[..., Any] | None = None
        self._accumulate = 1
        self._micro_batches = 0
        self._optimizers: list[Optimizer] = []
        self._preparers: list[Callable[[Any], Any]] = []
        self._contexts: list[Callable[[], contextlib.AbstractContextManager[Any]]] = []
        self._step_enders: list[Callable[[int], None]] = []
        self._optimizer_contexts: list[Callable[[], contextlib.AbstractContextManager[Any]]] = []
        self._zero_grad_in_step = False
        self._cudagraphs: StackComponent = StackComponent()

    @property
    def backward_in_step(self) -> bool:
        """Whether the compiled step runs backward itself (``scope=step_backward``, automatic optimization)."""
        return self.plan is not None and self.plan.backward_in_step

    # -- setup: the ordered sequence -----------------------------------------------------------
    def setup(self, module: L.LightningModule, optimizers: list[Optimizer], device: torch.device,
              accumulate_grad_batches: int = 1) -> None:
        """Configure torch, transform the module in order, compile, and prepare the optimizers."""
        self.prepare_module(module, device, accumulate_grad_batches)
        self.prepare_optimizers(module, optimizers, device)

    def prepare_module(self, module: L.LightningModule, device: torch.device, accumulate_grad_batches: int = 1) -> None:
        """Steps 1-3 on the plain module: shape policy, saved activations, compile. A sharding strategy
        shards after this and builds the optimizers on the sharded parameters, then calls
        ``prepare_optimizers``."""
        s = self.settings
        self._accumulate = accumulate_grad_batches
        shape = build_shape_policy(s.dynamic)
        offload = build_offload(s.offload, device, s.compile.block_types)
        offload.measured = self.offload_measured
        cudagraphs = self._cudagraphs = build_cudagraphs(s.cudagraphs, device)
        if isinstance(cudagraphs, CudaGraphs) and accumulate_grad_batches > 1:
            raise ValueError(cudagraphs_accumulation_error(accumulate_grad_batches))
        plan = self.plan = resolve_plan(s.compile, s.cudagraphs, shape.dynamic_arg, device, [],
                                        cudagraphs_active=isinstance(cudagraphs, CudaGraphs),
                                        automatic_optimization=module.automatic_optimization)
        if (note := manual_optimization_note(s.compile.scope, plan)) is not None:
            log.info(note)
        # Lightning's loop counters and batch_idx become graph inputs: no recompile per step.
        state = PythonState(module.training_step)
        self.components = [self.errors, shape, state, offload, cudagraphs]
        self._configure_compiler(plan)
        self.errors.configure()
        apply_shape_policy(shape, state, module)
        apply_saved_activations(offload, module)
        self._step, self.modules_compiled = apply_compile(module, module.training_step, plan, accumulate_grad_batches)

    def prepare_optimizers(self, module: L.LightningModule, optimizers: list[Optimizer], device: torch.device) -> None:
        """Steps 4-5, on the optimizers as they will step (sharded parameters under FSDP2): the
        optimizer-step policy, CUDA graphs; then route ``training_step`` through the stack."""
        assert self.plan is not None, "prepare_module first"
        plan = self.plan = resolve_optimizers(self.plan, self.settings.compile.optimizer, optimizers, device,
                                              cudagraphs_active=isinstance(self._cudagraphs, CudaGraphs))
        self.optimizer_step_policy = apply_optimizer_step(optimizers, plan, device)
        apply_cudagraphs(self._cudagraphs, module, optimizers)
        # The first line is the console's (runner's CLI prints only that); the reason goes to the log file.
        log.info("compile stack: scope=%s backend=%s optimizer=%s\n  options: %s\n  optimizer: %s", plan.scope.value,
                 plan.kwargs["backend"], plan.optimizer.value, plan.kwargs.get("options", {}), plan.optimizer_reason)
        self._bind(module, optimizers)

    def _configure_compiler(self, plan: CompilePlan) -> None:
        """The process-wide settings the compile config owns (restored by ``teardown``)."""
        c, t = self.settings.compile, self._torch
        if c.cache_dir:
            t.env(_CACHE_DIR_ENV, str(c.cache_dir))
        # on_error=eager: a frame that fails to compile runs eagerly (counted by telemetry).
        t.dynamo("suppress_errors", c.on_error is OnError["eager"])
        # loss.backward() traced into the step's graph for step_backward, and only then.
        t.dynamo("trace_autograd_ops", plan.backward_in_step)

    def _bind(self, module: L.LightningModule, optimizers: list[Optimizer]) -> None:
        """Route every training_step call through the stack; per-step hooks only of components that
        override them (a disabled feature costs nothing in the hot loop)."""
        self._module, self._optimizers = module, optimizers
        comps = self.components
        self._preparers = [c.prepare_batch for c in comps if overrides(c, "prepare_batch")]
        self._contexts = [c.step_context for c in comps if overrides(c, "step_context")]
        if self.plan is not None and self.plan.compiled_autograd:
            compiler = torch.compile(**self.plan.compiled_autograd_kwargs)
            self._contexts.append(lambda: ti.compiled_autograd(compiler))
            self._backward_context: Callable[[], contextlib.AbstractContextManager[Any]] = \
                lambda: ti.compiled_autograd(compiler)
        else:
            self._backward_context = contextlib.nullcontext
        self._step_enders = [c.on_step_end for c in comps if overrides(c, "on_step_end")]
        # self.log/log_dict and every torchmetrics object's methods run after the compiled step.
        self.deferred_log.bind(module, metric_methods(module), detach_in_step=self.backward_in_step)
        self._optimizer_contexts = [c.optimizer_step_context for c in comps if overrides(c, "optimizer_step_context")]
        self._zero_grad_in_step = self.plan is not None and self.plan.backward_in_step
        if self._zero_grad_in_step:
            # Lightning zeroes gradients between training_step and backward; here backward runs inside
            # the step, so zeroing moves to just before it (same accumulation boundaries).
            module.optimizer_zero_grad = _skip_zero_grad  # type: ignore[method-assign]
        # The strategy's call and DDP's forward redirection both reach training_step.
        module.training_step = self.training_step  # type: ignore[method-assign]

    def teardown(self) -> None:
        """Unpatch the module and restore every process-wide setting the stack changed."""
        if self._module is not None:
            for name in ("training_step", "optimizer_zero_grad"):
                vars(self._module).pop(name, None)
        self._module = None
        for c in reversed(self.components):
            c.teardown()
        self._torch.restore()

    # -- per step ------------------------------------------------------------------------------
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """One training step through every component's context, with deferred logging."""
        assert self._module is not None and self._step is not None
        if args and self._preparers:
            batch = args[0]
            for prepare in self._preparers:
                batch = prepare(batch)
            args = (batch, *args[1:])
        if self._zero_grad_in_step and self._micro_batches % self._accumulate == 0:
            for opt in self._optimizers:
                opt.zero_grad(set_to_none=True)
        self._micro_batches += 1
        with contextlib.ExitStack() as stack:
            for context in self._contexts:
                stack.enter_context(context())
            stack.enter_context(self.deferred_log.capture(self._module))
            out = self._step(*args, **kwargs)
        return self.deferred_log.resolve(out)

    @contextlib.contextmanager
    def backward_context(self) -> Iterator[None]:
        with self._backward_context():
            yield

    def optimizer_step(self, optimizer: Optimizer) -> None:
        assert self.optimizer_step_policy is not None
        with contextlib.ExitStack() as stack:
            for context in self._optimizer_contexts:
                stack.enter_context(context())
            self.optimizer_step_policy.step(optimizer)
        self.steps += 1
        for step_end in self._step_enders:
            step_end(self.steps)

    # -- what it did ---------------------------------------------------------------------------
    def explain_compile_error(self, exc: BaseException) -> str | None:
        """One paragraph for a compile error raised during fit (None when it is not one)."""
        return explain_compile_error(exc, self.errors)

    @property
    def measures_saved_activations(self) -> bool:
        """Whether ``measure_saved_activations`` has anything to measure (a strategy, and measuring on)."""
        offload = self.settings.offload
        return offload.strategy is not OffloadStrategy.none and offload.measure

    def measure_saved_activations(self, module: L.LightningModule, batch: Any, device: torch.device,
                                  context: Callable[[], contextlib.AbstractContextManager[Any]]
                                  = contextlib.nullcontext) -> dict[str, Any]:
        """Saved-activation bytes and gradient error of the offload strategy against ``none``, on the
        path the run takes (``runner.stack.offload_on_path``), under ``context`` (the trainer's
        precision). Call before ``fit``: it resets the compiler between variants. The figures also go
        into this stack's report."""
        if not self.measures_saved_activations:
            return {}
        if not module.automatic_optimization:  # its step needs a trainer (manual_backward, opt.step)
            self.offload_measured["offload/measure_skipped"] = "manual optimization: the step needs the trainer"
        else:
            s = self.settings
            self.offload_measured.update(measure_on_run_path(module, batch, device, context, compile_cfg=s.compile,
                                                             dynamic=s.dynamic, offload=s.offload,
                                                             cudagraphs=s.cudagraphs))
        return dict(self.offload_measured)

    def figures(self) -> dict[str, Any]:
        """What the stack applied, for the report."""
        c = self.settings.compile
        out: dict[str, Any] = {
            "compile/scope": c.scope.value,
            "compile/backend": c.backend,
            "compile/modules_compiled": self.modules_compiled,
            "compile/compiled_autograd": c.compiled_autograd,
        }
        if self.plan is not None:
            out["compile/mode"] = self.plan.kwargs.get("mode")
            out["compile/options"] = dict(self.plan.kwargs.get("options", {}))  # runner's defaults included
        if self.optimizer_step_policy is not None:
            out.update(self.optimizer_step_policy.figures())
        for comp in self.components:
            out.update(comp.figures())
        return out


# -- the ordered transforms, one call each ---------------------------------------------------------
def apply_shape_policy(shape: ShapePolicyComponent, state: PythonState, module: torch.nn.Module) -> None:
    """1. Dynamo's dynamic-shape settings, (per step) the batch marks, and Lightning's counters as
    symbolic inputs."""
    shape.configure()
    state.configure()
    shape.apply(module)


def apply_saved_activations(offload: OffloadComponent, module: torch.nn.Module) -> None:
    """2. Saved-tensor hooks or checkpoint wrappers, on the plain module, before it is compiled."""
    offload.configure()
    offload.apply(module)


def apply_optimizer_step(optimizers: list[Optimizer], plan: CompilePlan, device: torch.device) -> OptimizerStep:
    """4. The optimizer step the plan chose (fused kernel, compiled, or as configured)."""
    step = OptimizerStep(plan.optimizer, plan.optimizer_reason, plan.optimizer_kwargs)
    for opt in optimizers:
        step.prepare(opt, device)
    return step


def apply_cudagraphs(cudagraphs: StackComponent, module: torch.nn.Module, optimizers: list[Optimizer]) -> None:
    """5. CUDA graphs: static addresses for parameters and optimizer state, step marking."""
    cudagraphs.configure()
    cudagraphs.apply(module)
    cudagraphs.bind_optimizers(optimizers)
