"""Typed schema of ``peft``: fine-tuning a model through low-rank adapters (LoRA, QLoRA; docs/peft.md),
referenced by ``runner.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Optional


class PeftMethod(Enum):
    """How the model's weights are trained."""

    none = "none"  # every weight trained (a full fine-tune)
    lora = "lora"  # base weights frozen, a low-rank adapter beside each target linear trained
    qlora = "qlora"  # lora, with the frozen base weights of the target linears stored in 4-bit NF4


@dataclass
class PeftConfig:
    """The ``peft`` group: which weights train, and the adapter's shape."""

    method: PeftMethod = PeftMethod.none  # none (full fine-tune), lora, or qlora.
    r: int = 16  # The adapter's rank: lora_A is [r, in_features], lora_B [out_features, r].
    alpha: float = 32.0  # The adapter's output is scaled by alpha / r (peft's lora_alpha).
    dropout: float = 0.0  # Dropout on the adapter's input (peft's lora_dropout); 0 runs no dropout op at all.
    # Names of the nn.Linear modules to adapt, each matching a module path or its end (peft's rule: q_proj matches
    # model.layers.0.self_attn.q_proj). Empty: every nn.Linear inside the model's repeated blocks (attention and MLP),
    # or every nn.Linear of a model without repeated blocks.
    target_modules: list[str] = field(default_factory=list)
    # Modules trained in full beside the adapter, saved with it (peft's modules_to_save). None: a transformers
    # classifier's head (classifier or score), nothing for other models; [] for none.
    modules_to_save: Optional[list[str]] = None
    # A saved adapter (a directory with adapter_config.json and adapter_model.safetensors) to start from.
    path: Optional[str] = None
