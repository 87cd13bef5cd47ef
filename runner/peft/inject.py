"""Put the adapter into a model: every weight frozen, each target linear replaced by its adapted layer in place
(by module path, so it works for any ``nn.Module``), the modules trained in full unfrozen, and a saved adapter
(``peft.path``) loaded. Which modules: ``runner.config.peft_targets.resolve_plan``, the rule the config check
runs before the run."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from runner.config.peft_targets import AdapterPlan, adapter_root, resolve_plan
from runner.config.schema_peft import PeftConfig, PeftMethod
from runner.peft.layer import LoRAConv1D, LoRALinear

ADAPTER = "runner_adapter"
"""The attribute of an adapted model that holds its ``Adapter``."""


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


def apply_peft(model: nn.Module, peft: PeftConfig) -> Adapter | None:
    """Adapt ``model`` in place as ``peft`` says; None (and the model untouched) for ``peft.method=none``."""
    if peft.method is PeftMethod.none:
        return None
    if peft.r <= 0:  # the config check says it first, with the fix; this keeps a user's own Trainer honest
        raise ValueError(f"peft.r={peft.r}: the adapter's rank must be a positive integer")
    plan = resolve_plan(model, peft)
    _, root = adapter_root(model)
    for p in model.parameters():
        p.requires_grad_(False)
    for name in plan.targets:
        parent_name, _, child = name.rpartition(".")
        parent = root.get_submodule(parent_name) if parent_name else root
        setattr(parent, child, _adapted(getattr(parent, child), peft))
    for name in plan.saved:
        for p in root.get_submodule(name).parameters():
            p.requires_grad_(True)
    adapter = Adapter(plan, peft, model, root)
    object.__setattr__(model, ADAPTER, adapter)  # a plain attribute: forward never reads it
    if peft.path:
        from runner.peft.files import load_adapter

        load_adapter(adapter, peft.path)
    return adapter


def _adapted(base: nn.Module, peft: PeftConfig) -> LoRALinear:
    if peft.method is PeftMethod.qlora:
        from runner.peft.nf4 import QLoRALinear

        return QLoRALinear(base, peft.r, peft.alpha, peft.dropout)
    kind = LoRALinear if isinstance(base, nn.Linear) else LoRAConv1D
    return kind(base, peft.r, peft.alpha, peft.dropout)


def adapter_of(model: nn.Module) -> Adapter | None:
    """The adapter ``apply_peft`` put into ``model``; None for a model it did not adapt."""
    adapter = getattr(model, ADAPTER, None)
    return adapter if isinstance(adapter, Adapter) else None


def merge_peft(model: nn.Module) -> int:
    """Fold each adapted layer into a plain layer of its base's kind (base + scale * B @ A), in place; how many
    layers were merged. Every parameter is trainable again, as in the model before ``apply_peft``."""
    names = [n for n, m in model.named_modules() if isinstance(m, LoRALinear)]
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, getattr(parent, child).merged())
    for p in model.parameters():
        p.requires_grad_(True)
    if ADAPTER in model.__dict__:
        del model.__dict__[ADAPTER]
    return len(names)
