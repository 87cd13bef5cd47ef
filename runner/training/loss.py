"""The cross-entropy ``TrainModule`` computes, chosen once before the fit: from the whole logits (:class:`FullLogits`)
or a chunk of positions at a time from the last hidden states and the output layer's weight (:class:`ChunkedLogits`,
``runner.losses.linear_cross_entropy``), as ``loss.chunked`` and the model decide (``runner.config.decisions.loss``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from runner.config.decisions import loss as loss_decision
from runner.config.decisions.loss import LossDecision
from runner.config.schema.loss import LossConfig
from runner.config.schema.peft import PeftConfig
from runner.losses import IGNORE_INDEX, Reduction, linear_cross_entropy, logits_bytes
from runner.peft.layer import LoRALinear


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, reduction: Reduction = "mean") -> torch.Tensor:
    """Cross-entropy over positions whose target is not padding (float32 for stability); ``reduction="none"``:
    each position's, ``targets``' shape."""
    out = F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(), ignore_index=IGNORE_INDEX,
                          reduction=reduction)
    return out.view(targets.shape) if reduction == "none" else out


class FullLogits:
    """The loss from the model's logits, ``[..., vocab]`` held whole (any model: a classifier's too)."""

    chunked = False

    def __call__(self, model: nn.Module, inputs: Any, targets: torch.Tensor,
                 reduction: Reduction = "mean") -> torch.Tensor:
        return lm_loss(model(inputs), targets, reduction)


class ChunkedLogits:
    """The loss from ``model(inputs, return_hidden=True)`` and ``head``'s weight, ``rows`` positions at a time."""

    chunked = True

    def __init__(self, head: nn.Module, rows: int) -> None:
        self.head = head
        self.rows = rows

    def __call__(self, model: nn.Module, inputs: Any, targets: torch.Tensor,
                 reduction: Reduction = "mean") -> torch.Tensor:
        hidden, weight, bias = head_operands(self.head, model(inputs, return_hidden=True))
        return linear_cross_entropy(hidden, weight, targets, bias=bias, rows=self.rows, reduction=reduction)


Loss = FullLogits | ChunkedLogits  # what ``TrainModule`` calls for its loss


def head_operands(head: nn.Module, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The hidden states, weight and bias whose linear is ``head(hidden)``: ``head``'s own for an ``nn.Linear``; for
    a LoRA-adapted one, the hidden states joined by the adapter's scaled inner activations and the weight joined by
    ``lora_B``'s (module docstring). Preference tuning's per-token log-probabilities take the same operands."""
    if isinstance(head, LoRALinear):
        # The inner activations LoRALinear.forward hands lora_B, gated (preference tuning's reference: 0 runs the
        # frozen base).
        inner = head.low_rank(hidden)
        weight = torch.cat([head.weight, head.lora_B.weight.to(head.weight.dtype)], dim=1)
        return torch.cat([hidden, inner.to(hidden.dtype)], dim=-1), weight, head.bias
    return hidden, head.weight, head.bias  # type: ignore[return-value]


@dataclass(frozen=True)
class LossPlan:
    """The loss a run computes, and why (its figures: ``loss/*``)."""

    decision: LossDecision
    head: str | None = None
    logits_bytes: int | None = None

    def loss_for(self, model: nn.Module) -> Loss:
        """The loss over ``model`` as it is now: its output layer looked up by path, after ``peft`` may have
        replaced it by its adapted layer."""
        if not self.decision.chunked or self.head is None or self.decision.rows is None:
            return FullLogits()
        return ChunkedLogits(model.get_submodule(self.head), self.decision.rows)

    def figures(self) -> dict[str, Any]:
        d = self.decision
        out: dict[str, Any] = {"loss/chunked": d.chunked, "loss/reason": d.reason}
        if d.chunked:
            out.update({"loss/chunks": d.chunks, "loss/chunk_rows": d.rows})
        if self.logits_bytes is not None:
            out["loss/logits_gib"] = round(self.logits_bytes / 2**30, 3)
        return out


FULL_LOGITS = LossPlan(LossDecision(False, None, None, "the whole logits (TrainModule built without a loss plan)"))


def resolve_loss(model: nn.Module, loss: LossConfig, peft: PeftConfig, data: dict[str, Any], traits: Any) -> LossPlan:
    """The loss ``model`` trains with, decided before ``peft`` adapts it (``runner.config.decisions.loss`` on the
    real model: what the config check decided on the meta one). Raises ``ValueError`` with the refusal where the
    check would have refused (a user's own ``Trainer``, where no check ran)."""
    facts = loss_decision.loss_facts(model, loss, peft, data, traits)
    decision = loss_decision.resolve_loss(facts)
    if decision.refusal is not None:
        raise ValueError(decision.refusal)
    tokens, vocab = facts.tokens, facts.vocab
    size = logits_bytes(tokens, vocab) if tokens is not None and vocab is not None else None
    output = model.output_layer() if decision.chunked else None  # type: ignore[operator]
    head = next(name for name, m in model.named_modules() if m is output) if output is not None else None
    return LossPlan(decision, head, size)
