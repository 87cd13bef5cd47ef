"""Carry out a ``CompilePlan``: compile modules in place, or wrap the training step.

Modules are compiled with ``nn.Module.compile()`` (in place), never wrapped, so ``state_dict`` keys
keep their original names (no ``_orig_mod.``) and checkpoints load into an eager model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from runner.stack.plan import CompilePlan, Target

Step = Callable[..., Any]


def find_blocks(module: nn.Module, block_types: tuple[str, ...] | list[str]) -> list[nn.Module]:
    """The repeated blocks ``scope=blocks`` compiles: modules whose class name is in
    ``block_types``, or else the children of the largest ``nn.ModuleList``."""
    if block_types:
        return [m for m in module.modules() if type(m).__name__ in block_types]
    lists = [list(m) for m in module.modules() if isinstance(m, nn.ModuleList)]
    return max(lists, key=len) if lists else []


def compiled_submodules(module: nn.Module) -> list[nn.Module]:
    """For ``scope=model``: the LightningModule's top-level children that hold parameters (a
    ``TrainModule``'s ``model``); compiling them in place compiles every forward the step runs."""
    return [m for m in module.children() if any(True for _ in m.parameters())]


def apply_module_compile(module: nn.Module, plan: CompilePlan) -> int:
    """Compile the model or its blocks in place. Returns how many modules were compiled."""
    if plan.target is Target.submodules:
        targets = compiled_submodules(module)
    elif plan.target is Target.blocks:
        targets = find_blocks(module, plan.block_types)
        if not targets:
            raise ValueError(
                "compile.scope=blocks found no repeated blocks: the model has no nn.ModuleList. Name the "
                "block classes with compile.block_types=[ClassName] or use compile.scope=step."
            )
    else:
        return 0
    for m in targets:
        m.compile(**plan.kwargs)
    return len(targets)


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


def apply_compile(module: nn.Module, step: Step, plan: CompilePlan, accumulate: int = 1) -> tuple[Step, int]:
    """Compile what the plan says; returns the training step to call and how many modules were
    compiled in place."""
    modules = apply_module_compile(module, plan)
    if plan.target is Target.step:
        return torch.compile(step, **plan.kwargs), modules
    if plan.target is Target.step_and_backward:
        return torch.compile(step_and_backward(step, accumulate), **plan.kwargs), modules
    return step, modules
