"""How the optimizer step runs (``compile.optimizer``): eager, fused kernel, or compiled.

Lightning's closure (forward, backward, gradient clipping) runs first, then one of these steps is
called without a closure: a compiled function cannot take Lightning's closure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim import Optimizer

from runner.config.schema import OptimizerPolicy
from runner.stack.plan import supports_fused

log = logging.getLogger(__name__)


@dataclass
class OptimizerStep:
    """Runs ``optimizer.step()`` under the resolved policy."""

    policy: OptimizerPolicy
    reason: str
    compile_kwargs: dict[str, Any]
    """``torch.compile`` arguments of a compiled step (``CompilePlan.optimizer_kwargs``)."""

    def __post_init__(self) -> None:
        self._compiled: dict[int, Callable[[], Any]] = {}

    def prepare(self, optimizer: Optimizer, device: torch.device) -> None:
        """Adapt the optimizer once, before the first step."""
        if self.policy is OptimizerPolicy.fused:
            if not supports_fused(optimizer, device):
                raise ValueError(
                    f"compile.optimizer=fused: {type(optimizer).__name__} has no fused kernel on {device.type}. "
                    "Use compile.optimizer=auto (picks the fastest supported choice) or compiled."
                )
            # In place, so the LR scheduler built in configure_optimizers keeps its optimizer.
            optimizer.defaults.update(fused=True, foreach=False)
            for group in optimizer.param_groups:
                group.update(fused=True, foreach=False)
        elif self.policy is OptimizerPolicy.compiled:
            # A Python-float LR is a guarded constant: every scheduler change would recompile.
            # A tensor LR is an input; LRScheduler fills it in place.
            for group in optimizer.param_groups:
                if not isinstance(group["lr"], torch.Tensor):
                    group["lr"] = torch.tensor(float(group["lr"]), device=device)
            kwargs = self.compile_kwargs
            # The class's step, not ``optimizer.step``: an LR scheduler replaces the latter with a
            # wrapper that Dynamo refuses to trace (a graph break and an eager step every time).
            step = type(optimizer).step.__get__(optimizer)
            self._compiled[id(optimizer)] = torch.compile(step, **kwargs)

    def step(self, optimizer: Optimizer) -> None:
        compiled = self._compiled.get(id(optimizer))
        if compiled is not None:
            compiled()
            optimizer._opt_called = True  # type: ignore[attr-defined]  # what the scheduler's wrapper records
        else:
            optimizer.step()

    def figures(self) -> dict[str, Any]:
        return {"compile/optimizer": self.policy.value, "compile/optimizer_reason": self.reason}
