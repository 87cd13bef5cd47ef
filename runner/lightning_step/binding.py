"""Routing a LightningModule's ``training_step`` through the stack without changing what Lightning sees."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

from torch import nn

_OURS = "__runner_step__"
_MISSING = object()
_RESULT_READS = frozenset({"_results", "callback_metrics", "logged_metrics", "progress_bar_metrics"})


def user_step(module: nn.Module) -> Callable[..., Any]:
    """The user's ``training_step`` of ``module``: an instance attribute the user set, else the class's, bound."""
    own = vars(module).get("training_step")
    if own is not None and not getattr(own, _OURS, False):
        return own  # type: ignore[no-any-return]
    return getattr(type(module), "training_step").__get__(module)  # noqa: B009 - the class's, not the instance's


def code_of(fn: Callable[..., Any]) -> types.CodeType | None:
    """The code object a step callable runs (through bound methods and ``functools.partial``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "__code__", None)


def takes_dataloader_iter(step: Callable[..., Any]) -> bool:
    """Whether the step pulls its own batches (``training_step(self, dataloader_iter)``)."""
    return "dataloader_iter" in inspect.signature(step).parameters


def reads_logged_results(module: nn.Module) -> bool:
    """Whether ``training_step`` reads what it logged back from the trainer (``self.trainer.callback_metrics``),
    directly or through a property: a compiled step logs after the graph, so such a step is not compiled whole."""
    code = code_of(user_step(module))
    if code is None:
        return False
    names = set(code.co_names)
    for name in list(names):
        prop = getattr(type(module), name, None)
        if isinstance(prop, property) and prop.fget is not None and (inner := code_of(prop.fget)) is not None:
            names |= set(inner.co_names)
    return bool(names & _RESULT_READS)


# Lightning reads the step's signature (batch_idx only when the step takes one; a dataloader_iter step gets the
# iterator) with inspect.getfullargspec, which does not follow __wrapped__: the stand-in carries the user's own
# __signature__, bound to the module when the step is the class's, or as a plain function when the user put their
# own callable on the instance (then that callable runs, and it is put back afterwards).
def install_step(module: nn.Module, run: Callable[..., Any]) -> Callable[[], None]:
    """Make ``module.training_step`` call ``run(*args, **kwargs)`` with the user's step's signature; the undo."""
    attrs = vars(module)
    prior = attrs.get("training_step", _MISSING)
    user = user_step(module)

    def training_step(*args: Any, **kwargs: Any) -> Any:
        # Bound as a method below, the module arrives first; a plain stand-in gets the call's args as they are.
        return run(*(args[1:] if bound else args), **kwargs)

    bound = prior is _MISSING
    func = getattr(type(module), "training_step") if bound else user  # noqa: B009
    training_step.__signature__ = inspect.signature(func)  # type: ignore[attr-defined]
    training_step.__name__ = getattr(func, "__name__", "training_step")
    training_step.__qualname__ = getattr(func, "__qualname__", "training_step")
    training_step.__doc__ = getattr(func, "__doc__", None)
    setattr(training_step, _OURS, True)
    attrs["training_step"] = types.MethodType(training_step, module) if bound else training_step

    def undo() -> None:
        if prior is _MISSING:
            attrs.pop("training_step", None)
        else:
            attrs["training_step"] = prior

    return undo


def turn_off_hooks(module: nn.Module, zero_grad: bool, clipping: bool) -> Callable[[], None]:
    """Lightning's ``optimizer_zero_grad`` and ``configure_gradient_clipping`` as no-ops where the stack does them."""
    if zero_grad:
        module.optimizer_zero_grad = lambda *args, **kwargs: None  # type: ignore[assignment]
    if clipping:
        module.configure_gradient_clipping = lambda *args, **kwargs: None  # type: ignore[assignment]

    def undo() -> None:
        vars(module).pop("optimizer_zero_grad", None)
        vars(module).pop("configure_gradient_clipping", None)

    return undo


def backward_ran_in_step(strategy: Any, closure_loss: Any) -> Any:
    """Lightning's hooks around a backward the compiled step already ran, without running backward again."""
    module = strategy.lightning_module
    strategy.pre_backward(closure_loss)
    closure_loss = strategy.precision_plugin.pre_backward(closure_loss, module)
    closure_loss = strategy.precision_plugin.post_backward(closure_loss, module)
    strategy.post_backward(closure_loss)
    return closure_loss
