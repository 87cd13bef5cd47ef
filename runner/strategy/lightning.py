"""``CompileStrategy`` and ``DDPCompileStrategy``: Lightning strategies that apply the compile stack.

They stay thin: Lightning does device placement, DDP wrapping, precision and checkpoint I/O; every
compile decision lives in ``CompileStack``. Use them in any Trainer::

    trainer = L.Trainer(strategy=CompileStrategy(compile=CompileConfig(scope=Scope.step)))
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor
from torch.optim import Optimizer

from runner.config.schema import CompileConfig, CudaGraphsConfig, DynamicConfig, OffloadConfig
from runner.stack import CompileSettings, CompileStack
from runner.strategy.log_fastpath import LogFastPath


def _destroy_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


class _CompileHooks:
    """The overrides both strategies share; each delegates to ``self.stack``."""

    stack: CompileStack
    _log_fastpath: LogFastPath | None = None

    def setup_environment(self) -> None:
        super().setup_environment()  # type: ignore[misc]
        # Every trainer function (fit, validate, test) logs: take the fast path until teardown.
        if self._log_fastpath is None:
            self._log_fastpath = LogFastPath()
        self._log_fastpath.install()  # idempotent: one hold per strategy
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            # Lightning destroys the process group at exit for NCCL only; a gloo group left to the
            # interpreter's finalization can abort the process ("terminate called without an active
            # exception", exit -6) after a fit that succeeded. Registering twice is harmless: the
            # second call finds nothing initialized.
            atexit.unregister(_destroy_process_group)
            atexit.register(_destroy_process_group)

    def _setup_stack(self, trainer: L.Trainer) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return
        self.stack.setup(
            self.lightning_module,  # type: ignore[attr-defined]
            self.optimizers,  # type: ignore[attr-defined]
            self.root_device,  # type: ignore[attr-defined]
            accumulate_grad_batches=trainer.accumulate_grad_batches,
        )

    def _owns_optimizer_step(self) -> bool:
        # A gradient scaler (fp16) must unscale and skip steps itself: leave that to Lightning.
        return getattr(self.precision_plugin, "scaler", None) is None  # type: ignore[attr-defined]

    def backward(self, closure_loss: Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> Tensor:
        plan = self.stack.plan
        if plan is not None and plan.backward_in_step:
            # The compiled step already ran backward; keep the hooks (on_before/after_backward) firing.
            lm = self.lightning_module  # type: ignore[attr-defined]
            self.pre_backward(closure_loss)  # type: ignore[attr-defined]
            closure_loss = self.precision_plugin.pre_backward(closure_loss, lm)  # type: ignore[attr-defined]
            closure_loss = self.precision_plugin.post_backward(closure_loss, lm)  # type: ignore[attr-defined]
            self.post_backward(closure_loss)  # type: ignore[attr-defined]
            return closure_loss
        with self.stack.backward_context():
            return super().backward(closure_loss, optimizer, *args, **kwargs)  # type: ignore[misc]

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any],
                       model: Any = None, **kwargs: Any) -> Any:
        if not self._owns_optimizer_step() or self.stack.optimizer_step_policy is None:
            return super().optimizer_step(optimizer, closure, model, **kwargs)  # type: ignore[misc]
        model = model or self.lightning_module  # type: ignore[attr-defined]
        # Lightning's closure runs forward, backward and gradient clipping; then our step, which a
        # compiled function can run because it takes no closure.
        result = self.precision_plugin._wrap_closure(model, optimizer, closure)  # type: ignore[attr-defined]
        self.stack.optimizer_step(optimizer)
        return result

    def teardown(self) -> None:
        if self._log_fastpath is not None:
            self._log_fastpath.restore()
        self.stack.teardown()
        super().teardown()  # type: ignore[misc]


def _settings(compile: CompileConfig | None, dynamic: DynamicConfig | None, offload: OffloadConfig | None,
              cudagraphs: CudaGraphsConfig | None) -> CompileSettings:
    return CompileSettings(
        compile=compile or CompileConfig(),
        dynamic=dynamic or DynamicConfig(),
        offload=offload or OffloadConfig(),
        cudagraphs=cudagraphs or CudaGraphsConfig(),
    )


class CompileStrategy(_CompileHooks, SingleDeviceStrategy):
    """One device, the whole compile stack. Every argument is optional: the defaults compile the
    training step with Inductor and pick the optimizer step for the device."""

    def __init__(
        self,
        compile: CompileConfig | None = None,
        dynamic: DynamicConfig | None = None,
        offload: OffloadConfig | None = None,
        cudagraphs: CudaGraphsConfig | None = None,
        device: str | torch.device | None = None,
        **kwargs: Any,
    ) -> None:
        device = device or ("cuda:0" if torch.cuda.is_available() else "cpu")
        super().__init__(device=device, **kwargs)
        self.stack = CompileStack(_settings(compile, dynamic, offload, cudagraphs))

    def setup(self, trainer: L.Trainer) -> None:
        super().setup(trainer)
        self._setup_stack(trainer)


class DDPCompileStrategy(_CompileHooks, DDPStrategy):
    """DDP (one process per device, any number of nodes) with the compile stack applied inside
    the DDP wrapper. On CPU use ``process_group_backend="gloo"``."""

    def __init__(
        self,
        compile: CompileConfig | None = None,
        dynamic: DynamicConfig | None = None,
        offload: OffloadConfig | None = None,
        cudagraphs: CudaGraphsConfig | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stack = CompileStack(_settings(compile, dynamic, offload, cudagraphs))

    def setup(self, trainer: L.Trainer) -> None:
        super().setup(trainer)
        self._setup_stack(trainer)
