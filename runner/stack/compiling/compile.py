"""Carry out a ``CompilePlan``: compile modules in place, or wrap the training step."""

# A module is compiled in place by giving it an instance ``forward`` that is ``torch.compile`` of its class's
# ``forward``, bound to the module: ``state_dict`` keys keep their names (no ``_orig_mod.``), forward hooks still run
# around it, a ``copy.deepcopy`` (EMA and weight-averaging callbacks) rebinds the copy's forward to the copy, and
# every module of one class shares one code object, so twelve blocks compile one graph. Not ``nn.Module.compile()``:
# on torch 2.11-2.13 it captures no frame at all for a built-in module (``nn.Linear``, ``nn.Sequential``...), which
# then silently runs eagerly (pytorch/pytorch#150915, fixed upstream by #185722). ``restore`` puts every module back.

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from runner.config.schema.options import InPlace
from runner.stack.compiling.blocks import find_blocks
from runner.stack.compiling.plan import CompilePlan

Step = Callable[..., Any]


def compiled_submodules(module: nn.Module) -> list[nn.Module]:
    """For ``scope=model``: the LightningModule's top-level children that hold parameters (a
    ``TrainModule``'s ``model``); compiling them in place compiles every forward the step runs."""
    return [m for m in module.children() if any(True for _ in m.parameters())]


class CompiledModules:
    """The modules compiled in place (see the module docstring), and how to put them back."""

    def __init__(self) -> None:
        self.modules: list[nn.Module] = []
        self.total = 0

    def compile(self, module: nn.Module, kwargs: Mapping[str, Any]) -> None:
        """Compile ``module``'s forward in place (once: a module already compiled here is left as it is)."""
        if "forward" in vars(module):
            return  # compiled already (or a forward the user set on the instance: leave it alone)
        forward = type(module).forward
        module.forward = types.MethodType(torch.compile(forward, **kwargs), module)  # type: ignore[method-assign]
        self.modules.append(module)
        self.total += 1

    def restore(self, modules: list[nn.Module] | None = None) -> None:
        """Put ``modules`` (default: every module compiled here) back to their eager forward."""
        for m in list(self.modules if modules is None else modules):
            vars(m).pop("forward", None)
            self.modules.remove(m)


def module_targets(module: nn.Module, plan: CompilePlan) -> list[nn.Module]:
    """The modules the plan compiles in place (none for the step scopes)."""
    in_place = plan.target.row.in_place
    if in_place is InPlace.submodules:
        return compiled_submodules(module)
    if in_place is not InPlace.blocks:
        return []
    targets = [m for _, m in find_blocks(module, plan.block_types)]
    if not targets:
        raise ValueError(
            "compile.scope=blocks found no repeated blocks: the model has no nn.ModuleList. Name the "
            "block classes with compile.block_types=[ClassName] or use compile.scope=step."
        )
    return targets


def step_and_backward(step: Step, accumulate: int) -> Step:
    """``step`` followed by ``backward()`` of its loss, for ``scope=step_backward``."""

    def run(*args: Any, **kwargs: Any) -> Any:
        out = step(*args, **kwargs)
        loss = out["loss"] if isinstance(out, Mapping) else out
        # Lightning divides the loss by accumulate_grad_batches before backward; so do we.
        (loss / accumulate).backward()
        # Returning the loss with its (consumed) grad_fn would break the graph: detach it.
        if isinstance(out, Mapping):
            return {**out, "loss": loss.detach()}
        return loss.detach()

    return run


def apply_compile(module: nn.Module, step: Step, plan: CompilePlan, compiled: CompiledModules,
                  accumulate: int = 1) -> Step:
    """Compile what the plan says (modules in place into ``compiled``); returns the training step to call."""
    for m in module_targets(module, plan):
        compiled.compile(m, plan.kwargs)
    if not plan.whole_step:
        return step
    return torch.compile(step_and_backward(step, accumulate) if plan.backward_in_step else step, **plan.kwargs)
