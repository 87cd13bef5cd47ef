"""What an adapted model trains and holds, as figures (``peft/*``): the summary's fine-tuning rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from runner.peft.adapter import adapter_of
from runner.peft.nf4 import QLoRALinear


def optimizer_state_bytes(optimizers: Iterable[Optimizer]) -> int:
    """Bytes of every tensor in the optimizers' state (AdamW: step, exp_avg, exp_avg_sq per parameter)."""
    return sum(v.numel() * v.element_size() for opt in optimizers for state in opt.state.values()
               for v in state.values() if isinstance(v, torch.Tensor))


def peft_figures(model: nn.Module, optimizers: Iterable[Optimizer]) -> dict[str, Any]:
    """The ``peft/*`` figures of ``model`` (adapted by ``apply_peft``); nothing for a model without an adapter."""
    adapter = adapter_of(model)
    if adapter is None:
        return {}
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    nf4 = [m for m in model.modules() if isinstance(m, QLoRALinear)]
    total = sum(p.numel() for p in params) + sum(2 * m.weight_codes.numel() for m in nf4)  # two values a code byte
    frozen = sum(p.numel() * p.element_size() for p in params if not p.requires_grad)
    frozen += sum(b.numel() * b.element_size() for m in nf4 for b in m.buffers(recurse=False))
    return {
        "peft/method": adapter.config.method.value,
        "peft/targets": len(adapter.plan.targets),
        "peft/trainable_params": trainable,
        "peft/total_params": total,
        "peft/trainable_pct": round(100 * trainable / max(total, 1), 3),
        "peft/optimizer_state_bytes": optimizer_state_bytes(optimizers),
        "peft/base_weight_bytes": frozen,
    }
