"""The interface every part of the compile stack implements.

``CompileStrategy`` holds an ordered list of components (shape policy, saved-tensor strategy,
compiler, optimizer step, CUDA graphs) and calls these methods at fixed points of each step. Every
method has a no-op default, so a disabled feature is a ``StackComponent`` that overrides nothing:
the hot loop has no ``if enabled:``.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager as ContextManager
from typing import Any

from torch import nn
from torch.optim import Optimizer


class StackComponent:
    """One part of the compile stack. Override only what the feature needs."""

    name: str = "component"

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

    def on_step_end(self, step: int) -> None:
        """Called after each optimizer step with the global step count."""

    def summary(self) -> dict[str, Any]:
        """Figures for loggers and the run report, with namespaced keys (``offload/saved_mib``)."""
        return {}
