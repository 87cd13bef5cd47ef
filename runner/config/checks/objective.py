"""Checks of ``objective``: a preference objective against its data, its settings, its reference."""

from __future__ import annotations

from runner.config import target_objects
from runner.config.schema import RunConfig
from runner.config.schema.objective import Loss, Reference, resolve_reference
from runner.config.schema.peft import PeftMethod

SHIPPED = "examples/data/preference.jsonl"


def check_objective_data(cfg: RunConfig) -> str | None:
    """A preference objective reads preference pairs, and preference pairs train a preference objective."""
    loss, pairs = cfg.objective.loss, getattr(target_objects.declared_or_none(cfg.data, "traits"), "pairs", None)
    target = target_objects.fields(cfg.data).get("_target_", "?")
    if loss.preference and pairs is False:
        return (f"objective={loss.value} trains on preference pairs, a chosen and a rejected completion of each "
                f"prompt, but the data (data._target_={target}) gives sequences with their targets, no pairs. Give "
                f"data=preference data.path=TABLE (columns prompt, chosen, rejected; runner ships {SHIPPED}, "
                "+recipe=llama_dpo trains on it), or objective=sft to train on this data's targets.")
    if pairs and not loss.preference:
        return (f"objective={loss.value} with data=preference: the pairs' chosen and rejected completions would have "
                "no loss to train them. Give objective=dpo (or simpo, orpo) to learn the preference; to fine-tune on "
                "answers alone, use data=instruct with prompt and response columns (objective=sft).")
    return None


def check_objective_numbers(cfg: RunConfig) -> str | None:
    """beta, the label smoothing and SimPO's margin."""
    o = cfg.objective
    if not o.loss.preference:
        return None
    if o.beta <= 0:
        return (f"objective.beta={o.beta} with objective={o.loss.value}: beta scales the log-probability margins the "
                "loss compares, and must be above 0. Give objective.beta=0.1 (DPO, ORPO) or 2.0 (SimPO), the defaults.")
    if not 0 <= o.label_smoothing < 0.5:
        return (f"objective.label_smoothing={o.label_smoothing}: the share of pairs taken as mislabelled must be in "
                "[0, 0.5) (at 0.5 the loss no longer prefers either completion). Give 0 (the plain loss) or e.g. 0.1.")
    if o.label_smoothing and o.loss is Loss.orpo:
        return (f"objective.label_smoothing={o.label_smoothing} with objective=orpo: ORPO's odds-ratio term has no "
                "label smoothing. Drop objective.label_smoothing, or use objective=dpo or simpo.")
    if o.gamma < 0:
        return (f"objective.gamma={o.gamma}: SimPO's target margin between the chosen and rejected rewards is 0 or "
                "more. Give objective.gamma=1.0 (the default; the SimPO paper keeps gamma / beta near 0.5).")
    return None


def check_reference(cfg: RunConfig) -> str | None:
    """A reference that exists for the objective and the model: the adapter's base needs a new adapter; SimPO and
    ORPO take none; a frozen copy is not sharded by FSDP."""
    o = cfg.objective
    if not o.loss.preference:
        return None
    if not o.loss.needs_reference:
        if o.reference is not Reference.auto:
            return (f"objective.reference={o.reference.value} with objective={o.loss.value}: {o.loss.value} compares "
                    "no reference model. Drop objective.reference, or use objective=dpo.")
        return None
    adapted = cfg.peft.method is not PeftMethod.none
    kind = resolve_reference(o, adapted, bool(cfg.peft.path))
    if kind is Reference.base and not adapted:
        return ("objective.reference=base: the reference is the frozen base an adapter leaves, and this run trains "
                "every weight (peft=none). Give peft=lora (or qlora), or objective.reference=copy (a frozen copy of "
                "the model) or objective.reference=precompute (computed once and cached).")
    if kind is Reference.base and cfg.peft.path:
        return (f"objective.reference=base with peft.path={cfg.peft.path}: the reference would be the base without the "
                "adapter this run starts from. Merge that adapter into its base first (python -m runner export RUN_DIR "
                "--merge, then model.path=RUN_DIR/model and a new adapter), or keep it in the reference: "
                "objective.reference=copy or objective.reference=precompute.")
    if kind is Reference.copy and cfg.trainer.sharded:
        return ("objective.reference=copy with trainer.distributed=fsdp: the frozen copy would be whole on every rank, "
                "not sharded. Give peft=lora (the reference is then the adapter's base, nothing copied) or "
                "objective.reference=precompute.")
    return None


CHECKS = [check_objective_data, check_objective_numbers, check_reference]
