"""``CompileStack``: the compile stack as one plain object, applied to a LightningModule.

Order of application (style.md): shape policy -> saved-tensor hooks -> compile -> optimizer ->
CUDA graphs. The Lightning strategies hold one ``CompileStack`` and delegate to it; the stack holds
no Lightning state beyond the module it patches, so it is testable on its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from torch.optim import Optimizer

from runner.config.schema import (
    CompileConfig,
    CudaGraphsConfig,
    DynamicConfig,
    OffloadConfig,
    OffloadStrategy,
    OnError,
    Scope,
)
from runner.dynamic import build_shape_policy
from runner.strategy.compiler import apply_module_compile, compile_step, resolve_compile_kwargs
from runner.strategy.component import StackComponent
from runner.strategy.cudagraphs import build_cudagraphs
from runner.strategy.deferred_log import DeferredLog
from runner.strategy.optimizer_step import OptimizerStep, resolve_optimizer_policy

log = logging.getLogger(__name__)


@dataclass
class CompileSettings:
    """Everything the compile stack is configured by: the typed ``compile``, ``dynamic``,
    ``offload`` and ``cudagraphs`` config nodes, usable without Hydra."""

    compile: CompileConfig = field(default_factory=CompileConfig)
    dynamic: DynamicConfig = field(default_factory=DynamicConfig)
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    cudagraphs: CudaGraphsConfig = field(default_factory=CudaGraphsConfig)


def build_offload_component(cfg: OffloadConfig, device: torch.device, block_types: list[str]) -> StackComponent:
    """The saved-tensor strategy; ``none`` is a no-op component."""
    if cfg.strategy is OffloadStrategy.none:
        return StackComponent()
    from runner.offload import build_offload

    return build_offload(cfg, device, block_types=block_types)


def _overrides(component: StackComponent, hook: str) -> bool:
    """Whether ``component`` does anything in the per-step ``hook`` (the base class's is a no-op)."""
    return getattr(type(component), hook) is not getattr(StackComponent, hook) or hook in vars(component)


def _skip_zero_grad(*args: Any, **kwargs: Any) -> None:
    """Stands in for ``LightningModule.optimizer_zero_grad`` when the step zeroes gradients itself."""


class CompileStack:
    """Applies the compile stack to a LightningModule and runs each training step through it."""

    def __init__(self, settings: CompileSettings) -> None:
        self.settings = settings
        self.deferred_log = DeferredLog()
        self.backward_in_step = settings.compile.scope is Scope.step_backward
        self.components: list[StackComponent] = []
        self.optimizer_step_policy: OptimizerStep | None = None
        self._module: L.LightningModule | None = None
        self._step: Callable[..., Any] | None = None
        self._accumulate = 1
        self._compiled_autograd: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
        self.modules_compiled = 0
        self.steps = 0
        self._micro_batches = 0
        self._optimizers: list[Optimizer] = []
        self._preparers: list[Callable[[Any], Any]] = []
        self._contexts: list[Callable[[], contextlib.AbstractContextManager[Any]]] = []
        self._step_enders: list[Callable[[int], None]] = []

    # -- setup ---------------------------------------------------------------------------------
    def setup(self, module: L.LightningModule, optimizers: list[Optimizer], device: torch.device,
              accumulate_grad_batches: int = 1) -> None:
        """Configure torch, transform the module, compile, and prepare the optimizers."""
        s = self.settings
        self._accumulate = accumulate_grad_batches
        shape = build_shape_policy(s.dynamic)
        cudagraphs = build_cudagraphs(s.cudagraphs, device)
        self.components = [shape, build_offload_component(s.offload, device, s.compile.block_types), cudagraphs]
        self._configure_compiler()
        for c in self.components:
            c.configure()
        for c in self.components:
            c.apply(module)

        kwargs = resolve_compile_kwargs(s.compile, s.cudagraphs, shape.dynamic_arg, device)
        scope = s.compile.scope
        self.modules_compiled = apply_module_compile(module, scope, s.compile.block_types, kwargs)
        original_step = module.training_step
        if scope is Scope.step:
            self._step = compile_step(original_step, kwargs)
        elif scope is Scope.step_backward:
            self._step = compile_step(self._step_and_backward(original_step), kwargs)
        else:
            self._step = original_step
        if s.compile.compiled_autograd:
            ca_kwargs = {k: v for k, v in kwargs.items() if k in ("backend", "fullgraph", "mode", "options")}
            compiler = torch.compile(**ca_kwargs)
            self._compiled_autograd = lambda: torch._dynamo.compiled_autograd._enable(compiler)

        cudagraphs_active = bool(cudagraphs.summary().get("cudagraphs/active"))
        policy, reason = (s.compile.optimizer, "no optimizer")
        for opt in optimizers:
            policy, reason = resolve_optimizer_policy(s.compile.optimizer, opt, device, cudagraphs_active)
        self.optimizer_step_policy = OptimizerStep(policy, reason, kwargs)
        for opt in optimizers:
            self.optimizer_step_policy.prepare(opt, device)
        for c in self.components:
            c.bind_optimizers(optimizers)
        log.info("compile stack: scope=%s backend=%s optimizer=%s (%s)", scope.value, kwargs["backend"],
                 policy.value, reason)

        self._module = module
        self._optimizers = optimizers
        # Only components that override a per-step hook are called each step: a disabled feature
        # costs nothing in the hot loop (measured: ~20 us/step of no-op calls and contexts before).
        self._preparers = [c.prepare_batch for c in self.components if _overrides(c, "prepare_batch")]
        self._contexts = [c.step_context for c in self.components if _overrides(c, "step_context")]
        if s.compile.compiled_autograd:
            self._contexts.append(self._compiled_autograd)
        self._step_enders = [c.on_step_end for c in self.components if _overrides(c, "on_step_end")]
        if self.backward_in_step:
            # Lightning zeroes gradients between training_step and backward; here backward runs inside
            # the step, so zeroing moves to just before it (same accumulation boundaries).
            module.optimizer_zero_grad = _skip_zero_grad  # type: ignore[method-assign]
        # Route every training_step call (the strategy's, and DDP's forward redirection) through the stack.
        module.training_step = self.training_step  # type: ignore[method-assign]

    def _configure_compiler(self) -> None:
        import torch._dynamo.config as dynamo_config

        c = self.settings.compile
        if c.cache_dir:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(c.cache_dir)
        # on_error=eager: a frame that fails to compile runs eagerly (counted by telemetry).
        dynamo_config.suppress_errors = c.on_error is OnError["eager"]
        # loss.backward() traced into the step's graph for step_backward, and only then: the flag is
        # process-wide and would outlive this run (the next job of a sweep, a user's own compile).
        dynamo_config.trace_autograd_ops = c.scope is Scope.step_backward

    def _step_and_backward(self, step: Callable[..., Any]) -> Callable[..., Any]:
        accumulate = self._accumulate

        def step_and_backward(*args: Any, **kwargs: Any) -> Any:
            out = step(*args, **kwargs)
            loss = out["loss"] if isinstance(out, Mapping) else out
            # Lightning divides the loss by accumulate_grad_batches before backward; so do we.
            (loss / accumulate).backward()
            # Returning the loss with its (consumed) grad_fn would break the graph: detach it.
            if isinstance(out, Mapping):
                return {**out, "loss": loss.detach()}
            return loss.detach()

        return step_and_backward

    def teardown(self) -> None:
        if self._module is not None:
            for name in ("training_step", "optimizer_zero_grad"):
                vars(self._module).pop(name, None)
        self._module = None

    # -- per step ------------------------------------------------------------------------------
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """One training step through every component's context, with deferred logging."""
        assert self._module is not None and self._step is not None
        if args and self._preparers:
            batch = args[0]
            for prepare in self._preparers:
                batch = prepare(batch)
            args = (batch, *args[1:])
        if self.backward_in_step and self._micro_batches % self._accumulate == 0:
            for opt in self._optimizers:
                opt.zero_grad(set_to_none=True)
        self._micro_batches += 1
        with contextlib.ExitStack() as stack:
            for context in self._contexts:
                stack.enter_context(context())
            stack.enter_context(self.deferred_log.capture(self._module))
            return self._step(*args, **kwargs)

    @contextlib.contextmanager
    def backward_context(self) -> Iterator[None]:
        with self._compiled_autograd():
            yield

    def optimizer_step(self, optimizer: Optimizer) -> None:
        assert self.optimizer_step_policy is not None
        self.optimizer_step_policy.step(optimizer)
        self.steps += 1
        for step_end in self._step_enders:
            step_end(self.steps)

    def summary(self) -> dict[str, Any]:
        """What the stack applied, for the report."""
        c = self.settings.compile
        out: dict[str, Any] = {
            "compile/scope": c.scope.value,
            "compile/backend": c.backend,
            "compile/modules_compiled": self.modules_compiled,
            "compile/compiled_autograd": c.compiled_autograd,
        }
        if self.optimizer_step_policy is not None:
            out.update(self.optimizer_step_policy.summary())
        for comp in self.components:
            out.update(comp.summary())
        return out
