"""Python state read inside the compiled step: never stale, and no recompile per step."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from runner import lightning_internals as li
from runner.stack.settings import StackComponent
from runner.torch_internals import settings

FIT_LOOP_STATE = li.FIT_LOOP_STATE


def state_sources(training_step: Callable[..., Any]) -> list[str]:
    """``dynamic_sources`` patterns for the Lightning state a ``training_step`` can read: the trainer's
    loop counters below its ``self`` and its own batch-index argument (whatever the user named them)."""
    fn = getattr(training_step, "__func__", training_step)
    params = list(inspect.signature(fn).parameters)
    patterns = []
    if params and params[0] != "args":
        patterns.append(settings.local_source_pattern(params[0], FIT_LOOP_STATE))
    # training_step(self, batch, batch_idx[, dataloader_idx]): ints Lightning passes every step
    patterns += [settings.local_source_pattern(p, "$") for p in params[2:4] if p not in ("args", "kwargs")]
    return patterns


# Dynamo specialises every int reached through an nn.Module: self.global_step is guarded with == 3 and the step
# recompiles every step until recompile_limit. The ints below Lightning's fit loop (epoch and step counters, batch
# progress) and batch_idx become dynamic sources instead, graph inputs from the first compile: a ratio of them stays
# symbolic, a branch on one recompiles once when it flips. Constants (self.hparams.lr) stay guarded constants;
# booleans cannot be symbolic, so a branch on one compiles each side once. (Lightning issue 17933, a stale
# current_epoch == 0, comes from torch.compile(module) wrapping a copy without the trainer; runner compiles in
# place, so no read is stale.)
class PythonState(StackComponent):
    """Makes Lightning's step-time Python state dynamic graph inputs (see the module docstring)."""

    name = "python_state"

    def __init__(self, training_step: Callable[..., Any]) -> None:
        self.patterns = state_sources(training_step)

    def configure(self) -> None:
        settings.add_dynamic_sources(self.torch_settings, self.patterns)

    def figures(self) -> dict[str, Any]:
        return {"compile/dynamic_state_sources": list(self.patterns)}
