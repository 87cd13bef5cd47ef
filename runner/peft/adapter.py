"""An adapted model's adapter: what ``inject`` puts into a model and ``files`` writes and reads."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from runner.config.decisions.peft import AdapterPlan
from runner.config.schema.peft import PeftConfig
from runner.peft.layer import LoRALinear

ADAPTER = "runner_adapter"  # The attribute of an adapted model that holds its ``Adapter``


@dataclass(frozen=True)
class Adapter:
    """An adapted model's adapter: its plan (targets, modules trained in full, under ``root``) and its settings."""

    plan: AdapterPlan
    config: PeftConfig
    model: nn.Module
    root: nn.Module

    def layers(self) -> dict[str, LoRALinear]:
        """The adapted layers by name under ``root``."""
        return {name: self.root.get_submodule(name) for name in self.plan.targets}  # type: ignore[misc]


def adapter_of(model: nn.Module) -> Adapter | None:
    """The adapter ``apply_peft`` put into ``model``; None for a model it did not adapt."""
    adapter = getattr(model, ADAPTER, None)
    return adapter if isinstance(adapter, Adapter) else None
