"""Put the adapter into a model: every weight frozen, each target linear replaced in place by its adapted layer, and
a saved adapter (``peft.path``) loaded."""

from __future__ import annotations

from torch import nn

from runner.config.decisions.peft import adapter_root, resolve_plan
from runner.config.schema.peft import PeftConfig, PeftMethod
from runner.peft.adapter import ADAPTER, Adapter
from runner.peft.files import load_adapter
from runner.peft.layer import LoRAConv1D, LoRALinear


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
        root.set_submodule(name, _adapted(root.get_submodule(name), peft))
    for name in plan.saved:
        for p in root.get_submodule(name).parameters():
            p.requires_grad_(True)
    adapter = Adapter(plan, peft, model, root)
    object.__setattr__(model, ADAPTER, adapter)  # a plain attribute: forward never reads it
    if peft.path:
        load_adapter(adapter, peft.path)
    return adapter


def _adapted(base: nn.Module, peft: PeftConfig) -> LoRALinear:
    if peft.method is PeftMethod.qlora:
        from runner.peft.nf4 import QLoRALinear

        return QLoRALinear(base, peft.r, peft.alpha, peft.dropout)
    kind = LoRALinear if isinstance(base, nn.Linear) else LoRAConv1D
    return kind(base, peft.r, peft.alpha, peft.dropout)


def merge_peft(model: nn.Module) -> int:
    """Fold each adapted layer into a plain layer of its base's kind, in place; how many were merged."""
    names = [n for n, m in model.named_modules() if isinstance(m, LoRALinear)]
    for name in names:
        model.set_submodule(name, model.get_submodule(name).merged())  # type: ignore[operator]
    for p in model.parameters():
        p.requires_grad_(True)
    if ADAPTER in model.__dict__:
        del model.__dict__[ADAPTER]
    return len(names)
