"""Typed schema of ``objective``, what the training step minimises (docs/preference.md): ``sft`` (the default), or the
preference objectives ``dpo``, ``simpo`` and ``orpo`` on pairs of a chosen and a rejected completion
(``data=preference``). DPO compares the policy with a reference; SimPO and ORPO need none."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional


class Loss(Enum):
    """What the training step minimises."""

    sft = "sft"  # cross-entropy of the data's targets (every data module)
    dpo = "dpo"  # Direct Preference Optimization, its sigmoid loss (label smoothing: conservative DPO)
    simpo = "simpo"  # SimPO: the length-normalised log-probabilities with a target margin, no reference
    orpo = "orpo"  # ORPO: the chosen completion's cross-entropy plus an odds-ratio term, no reference

    @property
    def preference(self) -> bool:
        """Whether it reads preference pairs (``data=preference``)."""
        return self is not Loss.sft

    @property
    def needs_reference(self) -> bool:
        """Whether it compares the policy with a reference model (DPO only)."""
        return self is Loss.dpo


class Reference(Enum):
    """Where DPO's reference log-probabilities come from."""

    auto = "auto"  # base under peft=lora|qlora, else copy
    base = "base"  # the adapter's frozen base, in the same compiled step as the policy (peft=lora|qlora)
    copy = "copy"  # a frozen copy of the model as it starts (a full fine-tune); its memory is in the summary
    precompute = "precompute"  # one pass before training, cached on disk under a key of what they depend on


@dataclass
class ObjectiveConfig:
    """The ``objective`` group: the loss and its settings."""

    loss: Loss = Loss.sft  # sft, dpo, simpo or orpo.
    # DPO: the strength of the pull towards the reference (TRL's beta); SimPO: the reward's scale; ORPO: the weight of
    # the odds-ratio term (the paper's lambda, TRL's beta).
    beta: float = 0.1
    # DPO and SimPO: the share of pairs assumed mislabelled (conservative DPO); 0 is the plain loss.
    label_smoothing: float = 0.0
    gamma: float = 0.5  # SimPO: the target reward margin (TRL's simpo_gamma).
    # DPO: where the reference log-probabilities come from: auto, base, copy or precompute.
    reference: Reference = Reference.auto
    # objective.reference=precompute: where the cached log-probabilities are kept (None: runner's data cache, beside the
    # token ids).
    cache_dir: Optional[str] = None


def resolve_reference(objective: ObjectiveConfig, adapted: bool, adapter_loaded: bool) -> Reference | None:
    """The reference ``objective`` uses (None: none): ``auto`` is the adapter's base under a new adapter, else a frozen
    copy (a full fine-tune, or an adapter loaded from ``peft.path``, which is part of the reference)."""
    if not objective.loss.needs_reference:
        return None
    if objective.reference is not Reference.auto:
        return objective.reference
    return Reference.base if adapted and not adapter_loaded else Reference.copy
