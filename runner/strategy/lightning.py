"""``CompileStrategy`` and ``DDPCompileStrategy``: Lightning strategies that apply the compile stack."""

from __future__ import annotations

import atexit
import contextlib
import functools
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor
from torch.optim import Optimizer

from runner import lightning_internals as li
from runner.config.schema import CompileConfig, CudaGraphsConfig, DynamicConfig, OffloadConfig
from runner.lightning_step.binding import backward_ran_in_step
from runner.lightning_step.log_fastpath import LogFastPath
from runner.stack import CacheArtifacts, CompileSettings, CompileStack, LightningSide, gradient_hooks
from runner.strategy.progress_sink import progress_sink

NO_TRAINABLE_PARAMETERS = (
    "{name} has no trainable parameters, so configure_optimizers built an optimizer over an empty "
    "parameter list ({error}). Give the module parameters with requires_grad=True (a finetuning callback "
    "that freezes everything leaves none), or, to run it without training, use trainer.validate/test/predict."
)


def _destroy_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def sample_batch(trainer: L.Trainer, module: L.LightningModule) -> tuple[Any, str]:
    """One validation batch for the saved-activation measurement (the training order stays untouched),
    from the datamodule or the module's own ``val_dataloader``; else ``(None, why)``."""
    from lightning.pytorch.utilities.model_helpers import is_overridden

    source: Any = getattr(trainer, "datamodule", None)
    if source is None or not is_overridden("val_dataloader", source, L.LightningDataModule):
        source = module if is_overridden("val_dataloader", module, L.LightningModule) else None
    if source is None:
        return None, "no val_dataloader (datamodule or module) to take a sample batch from"
    for batch in source.val_dataloader():
        return batch, ""
    return None, "the val_dataloader is empty"


class CompileStrategyBase:
    """What every runner strategy adds to its Lightning base: the stack, and the hooks that reach it."""

    stack: CompileStack
    _log_fastpath: LogFastPath | None = None

    def __init__(
        self,
        compile: CompileConfig | None = None,
        dynamic: DynamicConfig | None = None,
        offload: OffloadConfig | None = None,
        cudagraphs: CudaGraphsConfig | None = None,
        console: bool = True,
        settings: CompileSettings | None = None,
        artifacts: CacheArtifacts | None = None,
        **kwargs: Any,
    ) -> None:
        """The four config nodes and the cache artifacts (or ``settings``, which holds them) configure the
        stack; every other keyword argument goes to the Lightning strategy. ``console``: print what compiles
        and a summary line at the end of fit (runner's own runs print a full report instead)."""
        super().__init__(**kwargs)
        self.stack = CompileStack(settings or CompileSettings(
            compile=compile or CompileConfig(), dynamic=dynamic or DynamicConfig(),
            offload=offload or OffloadConfig(), cudagraphs=cudagraphs or CudaGraphsConfig(),
            artifacts=artifacts or CacheArtifacts()), console=console)

    def setup_environment(self) -> None:
        super().setup_environment()  # type: ignore[misc]
        # Every trainer function (fit, validate, test) logs: take the fast path until teardown.
        if self._log_fastpath is None:
            self._log_fastpath = LogFastPath()
        self._log_fastpath.install()  # idempotent: one hold per strategy
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            # Lightning destroys the process group at exit for NCCL only; a gloo group left to the
            # interpreter's finalization can abort the process ("terminate called without an active
            # exception", exit -6) after a fit that succeeded. Registering twice is harmless.
            atexit.unregister(_destroy_process_group)
            atexit.register(_destroy_process_group)

    def lightning_side(self, trainer: L.Trainer, optimizers: Callable[[], list[Optimizer]] | None = None,
                       shard: Callable[[torch.nn.Module], None] | None = None) -> LightningSide:
        """Lightning's side of the stack's ordered apply, for this trainer."""
        strategy: Any = self
        return LightningSide(
            device=strategy.root_device,
            optimizers=optimizers or self._optimizers_now,
            accumulate_grad_batches=trainer.accumulate_grad_batches,
            world_size=trainer.world_size,
            sample_batch=functools.partial(sample_batch, trainer, strategy.lightning_module),
            step_context=strategy.precision_plugin.train_step_context,
            shard=shard,
            scaler=getattr(strategy.precision_plugin, "scaler", None) is not None,
            optimizer_lists=li.optimizer_lists(strategy),
            module_optimizers=functools.partial(li.lightning_optimizers, strategy),
            sink=progress_sink(trainer) if self.stack.console else None,
            gradient_clip_val=trainer.gradient_clip_val,
            gradient_clip_algorithm=str(getattr(trainer.gradient_clip_algorithm, "value", None) or "norm"),
            # Lightning's callback connector sets ``trainer.callbacks`` at run time: the class does not declare it.
            gradient_hooks=gradient_hooks(strategy.lightning_module, trainer.callbacks),  # type: ignore[attr-defined]
        )

    def _optimizers_now(self) -> list[Optimizer]:
        return list(self.optimizers)  # type: ignore[attr-defined]

    def setup(self, trainer: L.Trainer) -> None:
        try:  # Lightning's own setup, with an empty optimizer explained in one paragraph
            super().setup(trainer)  # type: ignore[misc]
        except ValueError as e:
            module: Any = getattr(self, "lightning_module", None)
            if "empty parameter list" in str(e) and module is not None and \
                    not any(p.requires_grad for p in module.parameters()):
                raise ValueError(NO_TRAINABLE_PARAMETERS.format(name=type(module).__name__, error=e)) from e
            raise
        if trainer.state.fn == TrainerFn.FITTING:
            self.stack.setup(self.lightning_module, self.lightning_side(trainer))  # type: ignore[attr-defined]

    def backward(self, closure_loss: Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> Tensor:
        if self.stack.backward_in_step:  # the compiled step already ran backward: only Lightning's hooks
            return backward_ran_in_step(self, closure_loss)
        with self.stack.backward_context():
            return super().backward(closure_loss, optimizer, *args, **kwargs)  # type: ignore[misc]

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any], model: Any = None,
                       **kwargs: Any) -> Any:
        # Lightning's own step: its precision plugin calls optimizer.step(closure=..., **kwargs) and the
        # optimizer runs the closure (the stack only made the optimizer fused or compiled).
        # Not fitting through the stack (e.g. a bare strategy call): nothing to count.
        with self.stack.optimizer_step_context() if self.stack.parts is not None else contextlib.nullcontext():
            return super().optimizer_step(optimizer, closure, model, **kwargs)  # type: ignore[misc]

    # Evaluation batches of a fit pass the stack too: under CUDA graphs each begins a new CUDA-graph step.
    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        with self.stack.eval_step_context():
            return super().validation_step(*args, **kwargs)  # type: ignore[misc]

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        with self.stack.eval_step_context():
            return super().test_step(*args, **kwargs)  # type: ignore[misc]

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        with self.stack.eval_step_context():
            return super().predict_step(*args, **kwargs)  # type: ignore[misc]

    def load_optimizer_state_dict(self, checkpoint: Any) -> None:
        # Lightning restores the optimizers after setup (a resume): the stack puts its LR tensors back.
        super().load_optimizer_state_dict(checkpoint)  # type: ignore[misc]
        self.stack.optimizers_restored()

    def teardown(self) -> None:
        if self._log_fastpath is not None:
            self._log_fastpath.restore()
        self.stack.teardown()
        super().teardown()  # type: ignore[misc]

    def figures(self) -> dict[str, Any]:
        """What the stack applied and did (the report collects it from the strategy)."""
        return self.stack.figures()

    def explain_compile_error(self, exc: BaseException) -> str | None:
        """One paragraph for a compile error the fit raised (None when it is not one), from the stack's
        explanation of its own errors (what it watched while compiling)."""
        return self.stack.explain_compile_error(exc)


class CompileStrategy(CompileStrategyBase, SingleDeviceStrategy):
    """One device, the whole compile stack. Every argument is optional: the defaults compile the
    training step with Inductor and pick the optimizer step for the device (the CUDA device if there
    is one)."""

    def __init__(self, *args: Any, device: str | torch.device | None = None, **kwargs: Any) -> None:
        """``device``: the one device (default the first CUDA device if there is one, else the CPU); ``"cuda"``
        means ``"cuda:0"``, as with ``accelerator="cuda"``."""
        chosen = torch.device(device or ("cuda:0" if torch.cuda.is_available() else "cpu"))
        if chosen.type == "cuda" and chosen.index is None:
            # Lightning's CUDA accelerator calls torch.cuda.set_device(root_device), which refuses a device
            # without an index ("Expected a torch.device with a specified index"): the GPU benchmark's error.
            chosen = torch.device("cuda", 0)
        super().__init__(*args, device=chosen, **kwargs)


class DDPCompileStrategy(CompileStrategyBase, DDPStrategy):
    """DDP (one process per device, any number of nodes) with the compile stack applied inside
    the DDP wrapper. On CPU use ``process_group_backend="gloo"``."""
