"""The interface every part of the compile stack implements.

``CompileStack`` holds the components in application order (shape policy, saved-activation
strategy, CUDA graphs, compile-error watch) and calls these methods at fixed points: ``configure``
and ``apply`` once before compiling, the per-step hooks every step, ``teardown`` once at the end.
Every method has a no-op default, so a disabled feature is a ``StackComponent`` that overrides
nothing: the hot loop has no ``if enabled:`` (the stack calls only the per-step hooks a component
overrides).

Process-wide torch settings are changed only through ``self.torch_settings`` (a
``TorchSettings``), which the base ``teardown`` restores: Hydra multirun jobs share one process.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager as ContextManager
from typing import Any

from torch import nn
from torch.optim import Optimizer

from runner.torch_internals import TorchSettings


class StackComponent:
    """One part of the compile stack. Override only what the feature needs."""

    name: str = "component"

    @property
    def torch_settings(self) -> TorchSettings:
        """This component's process-wide torch settings; ``teardown`` puts back what they replaced."""
        settings = vars(self).get("_torch_settings")
        if settings is None:
            settings = vars(self)["_torch_settings"] = TorchSettings()
        return settings

    def configure(self) -> None:
        """Set process-wide compiler configuration, once, before anything is compiled."""

    def apply(self, module: nn.Module) -> None:
        """Transform the model in place before compilation (e.g. wrap blocks in checkpoints)."""

    def bind_optimizers(self, optimizers: list[Optimizer]) -> None:
        """Called once with the run's optimizers, after the optimizer-step policy prepared them."""

    def prepare_batch(self, batch: Any) -> Any:
        """Called each training step on the device batch, before the compiled step sees it."""
        return batch

    def step_context(self) -> ContextManager[Any]:
        """A context entered around each training step's forward and backward."""
        return contextlib.nullcontext()

    def after_backward(self) -> None:
        """Called after each training step's backward (inside the compiled step when it runs backward)."""

    def optimizer_step_context(self) -> ContextManager[Any]:
        """A context entered around each optimizer step (after backward)."""
        return contextlib.nullcontext()

    def on_step_end(self, step: int) -> None:
        """Called after each optimizer step with the global step count."""

    def teardown(self) -> None:
        """Undo what ``configure`` changed process-wide (subclasses call ``super().teardown()``)."""
        self.torch_settings.restore()

    def figures(self) -> dict[str, Any]:
        """Figures for loggers and the run report, with namespaced keys (``offload/saved_bytes``)."""
        return {}


def overrides(component: StackComponent, hook: str) -> bool:
    """Whether ``component`` does anything in the per-step ``hook`` (the base class's is a no-op)."""
    return getattr(type(component), hook) is not getattr(StackComponent, hook) or hook in vars(component)
