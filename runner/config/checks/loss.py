"""Checks of ``loss``: a chunked loss that cannot run is refused before anything is written, with the fix; what the
setting will not do is said once (``WARNINGS``). The model is built on the meta device and asked the rule the
builder follows (``runner.config.rules.loss``)."""

from __future__ import annotations

from collections.abc import Callable

from runner.config import target_objects
from runner.config.rules.loss import LossDecision, LossFacts, data_facts, decide, head_problem
from runner.config.schema import RunConfig

Check = Callable[[RunConfig], "str | None"]


def loss_facts(cfg: RunConfig) -> LossFacts | None:
    """The facts ``loss.chunked`` is decided from, found before the run; None when the model does not build on the
    meta device (its own checks say why) or is a LightningModule of your own (its loss is its own)."""
    import lightning as L

    from runner.losses import chunking_unavailable

    model = target_objects.meta_model(cfg.model)
    if model is None or isinstance(model, L.LightningModule):
        return None
    classifier, tokens = data_facts(target_objects.fields(cfg.data), target_objects.declared(cfg.data, "traits"))
    head, vocab = head_problem(model, cfg.peft)
    return LossFacts(cfg.loss.mode, cfg.loss.chunks, cfg.loss.chunked, classifier, head, chunking_unavailable(),
                     tokens, vocab)


def _decision(cfg: RunConfig) -> LossDecision | None:
    facts = loss_facts(cfg)
    if facts is None:
        return None
    return decide(facts)


def check_loss(cfg: RunConfig) -> str | None:
    """``loss.chunked`` and ``loss.chunks``: a value runner does not know, a count below one, a chunked loss on a
    model whose output layer runner cannot find or on a torch without the chunked op."""
    if cfg.loss.mode is None or (cfg.loss.chunks is not None and cfg.loss.chunks < 1):
        return decide(LossFacts(cfg.loss.mode, cfg.loss.chunks, cfg.loss.chunked)).refusal  # without the model
    decision = _decision(cfg)
    return decision.refusal if decision is not None else None


def warn_loss(cfg: RunConfig) -> str | None:
    """What the setting will not do: ``true`` on a classifier, ``auto`` on large logits it cannot chunk."""
    decision = _decision(cfg)
    return decision.note if decision is not None and decision.refusal is None else None


CHECKS: list[Check] = [check_loss]
WARNINGS: list[Check] = [warn_loss]
