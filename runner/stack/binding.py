"""Routing a LightningModule's ``training_step`` through the stack without changing what Lightning sees.

Lightning reads the step's signature to decide what to pass (``batch_idx`` only when the step takes
one; a ``dataloader_iter`` step gets the iterator instead of a batch) with ``inspect.getfullargspec``,
which does not follow ``functools.wraps``' ``__wrapped__``. The stand-in is therefore a method bound to
the module whose ``__signature__`` is the user's own, so every inspection sees the user's parameters.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

from torch import nn


def user_step(module: nn.Module) -> Callable[..., Any]:
    """The module's own ``training_step`` (the class's, bound), whatever stand-in is installed now."""
    return getattr(type(module), "training_step").__get__(module)  # noqa: B009 - the class attribute, not the instance's


def takes_dataloader_iter(step: Callable[..., Any]) -> bool:
    """Whether the step pulls its own batches (``training_step(self, dataloader_iter)``)."""
    return "dataloader_iter" in inspect.signature(step).parameters


def install_step(module: nn.Module, run: Callable[..., Any]) -> None:
    """Make ``module.training_step`` call ``run(*args, **kwargs)``, with the user's step's signature."""
    func = getattr(type(module), "training_step")  # noqa: B009

    def training_step(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return run(*args, **kwargs)

    training_step.__signature__ = inspect.signature(func)  # type: ignore[attr-defined]
    training_step.__name__, training_step.__qualname__ = func.__name__, func.__qualname__
    training_step.__doc__ = func.__doc__
    vars(module)["training_step"] = types.MethodType(training_step, module)


def remove_step(module: nn.Module) -> None:
    """Back to the class's ``training_step``."""
    vars(module).pop("training_step", None)
