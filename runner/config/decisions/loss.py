"""``loss.chunked``: whether a run's cross-entropy is computed a chunk of positions at a time, and why, decided from
:func:`loss_facts` on the meta-device model before the run and on the real one by ``runner.training.loss``."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from runner.config import target_objects
from runner.config.decisions.peft import PeftTargetError, adapter_root, resolve_plan
from runner.config.schema import RunConfig
from runner.config.schema.loss import Chunked, LossConfig
from runner.config.schema.peft import PeftConfig, PeftMethod
from runner.metrics import counted

# auto chunks where a step's float32 logits exceed one chunk's 256 MiB (2,048 positions of a 32,000-id vocabulary):
# below it a chunk is the whole logits; above it chunks measured no slower than the whole logits (docs/large-vocab.md).
LARGE_LOGITS_BYTES = 256 * 2**20
# Where the data does not say a step's positions (no batch_size and seq_len), auto chunks a vocabulary larger than
# this: Llama 3's 128,256 ids, not Llama 2's 32,000.
LARGE_VOCAB = 65_536

HEAD_PROTOCOL = ("give the module an output_layer() method returning the nn.Linear whose output is the logits, and "
                 "a forward(x, return_hidden=True) that returns that layer's input (the last hidden states) instead "
                 "of the logits (docs/large-vocab.md)")


@dataclass(frozen=True)
class LossFacts:
    """What ``loss.chunked`` is decided from."""

    mode: Chunked | None  # None: a value that is none of auto, true, false
    chunks: int | None
    raw: Any = "auto"  # loss.chunked as given, for the messages
    classifier: bool = False  # one class per example: logits [batch, classes], no vocabulary to chunk
    head: str | None = None  # why runner found no usable output layer, in a clause (None: it found one)
    torch: str | None = None  # why this torch cannot chunk (runner.losses.chunking_unavailable)
    tokens: int | None = None  # positions of a full step (batch_size x seq_len); None where the data does not say
    vocab: int | None = None  # the output layer's rows


@dataclass(frozen=True)
class LossDecision:
    """Whether to chunk, by how much, why (the report's ``loss/reason``), and what to refuse or say."""

    chunked: bool
    rows: int | None  # positions per chunk; None when unchunked
    chunks: int | None  # chunks of a full step; None when unchunked or the step's positions are unknown
    reason: str
    refusal: str | None = None  # the one-paragraph refusal, before the run
    note: str | None = None  # said where the setting does not do what it says (auto left unchunked on large logits)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _logits(f: LossFacts) -> str:
    if f.tokens is None or f.vocab is None:
        return f"a {f.vocab:,}-id vocabulary" if f.vocab else "an unknown vocabulary"
    return (f"a step's float32 logits are {_gib(4 * f.tokens * f.vocab)} ({f.tokens:,} positions x "
            f"{f.vocab:,} ids)")


def resolve_loss(f: LossFacts) -> LossDecision:
    """Whether and how to chunk, from the facts."""
    from runner.losses import MIN_TORCH, chunk_count, chunk_rows

    if f.mode is None:
        return LossDecision(False, None, None, "refused", refusal=(
            f"loss.chunked={f.raw}: give auto (chunked where a step's logits would be large), true (chunked, or "
            "refused where it cannot be) or false (the whole logits)."))
    if f.chunks is not None and f.chunks < 1:
        return LossDecision(False, None, None, "refused", refusal=(
            f"loss.chunks={f.chunks}: the number of chunks a step's positions are cut into must be at least 1. Give "
            "loss.chunks=8, or drop it (loss.chunks=null: chunks of at most 256 MiB of logits)."))
    if f.classifier:
        note = (f"loss.chunked={f.raw} with a classifier: its logits are [batch, classes], one row per example, "
                "with no vocabulary to chunk; the setting is ignored.") if f.mode is Chunked.true or f.chunks else None
        return LossDecision(False, None, None, "a classifier: logits of one row per example", note=note)
    if f.mode is Chunked.false:
        if f.chunks is not None:
            return LossDecision(False, None, None, "refused", refusal=(
                f"loss.chunks={f.chunks} with loss.chunked=false: the chunk count is for a chunked loss. Drop "
                "loss.chunks, or set loss.chunked=true."))
        return LossDecision(False, None, None, "loss.chunked=false: the whole logits")
    blocker = f.head or f.torch
    if blocker is not None or f.vocab is None:
        why = blocker or "the output layer's size is unknown"
        if f.mode is Chunked.true:
            fix = (f"Install torch>={MIN_TORCH[0]}.{MIN_TORCH[1]}" if f.head is None else
                   f"To chunk a model of your own, {HEAD_PROTOCOL}")
            return LossDecision(False, None, None, "refused", refusal=(
                f"loss.chunked=true, but {why}: runner computes a chunked loss from the last hidden states and the "
                f"output layer's weight, never the logits. {fix}; or set loss.chunked=auto (the whole logits where "
                "it cannot chunk) or loss.chunked=false."))
        large = _large(f)
        note = (f"loss.chunked=auto: {_logits(f)}, but {why}: the loss is computed from the whole logits."
                if large else None)
        return LossDecision(False, None, None, f"unchunked: {why}", note=note)
    if f.chunks is not None and f.tokens is None:
        return LossDecision(False, None, None, "refused", refusal=(
            f"loss.chunks={f.chunks}, but the data does not say a step's positions (data.batch_size and "
            "data.seq_len), which the count divides. Drop loss.chunks (chunks of at most 256 MiB of logits)."))
    if f.mode is Chunked.auto and f.chunks is None and not _large(f):
        return LossDecision(False, None, None, f"auto: {_logits(f)}, within {_gib(LARGE_LOGITS_BYTES)}: the whole "
                            "logits")
    rows = chunk_rows(f.vocab, f.tokens, f.chunks)
    count = chunk_count(f.tokens, rows) if f.tokens is not None else None
    cut = f"{counted(count, 'chunk')} of {rows:,} positions" if count is not None else f"chunks of {rows:,} positions"
    why = "loss.chunked=true" if f.mode is Chunked.true else "auto"
    return LossDecision(True, rows, count, f"{why}: {_logits(f)}; {cut}")


def _large(f: LossFacts) -> bool:
    if f.vocab is None:
        return False
    if f.tokens is None:
        return f.vocab > LARGE_VOCAB
    return 4 * f.tokens * f.vocab > LARGE_LOGITS_BYTES


def output_layer(model: Any) -> tuple[Any | None, str | None]:
    """``model``'s output layer (declared by ``output_layer()`` and ``forward(x, return_hidden)``) and None, or None
    and why not."""
    from torch import nn

    name = type(model).__name__
    find = getattr(model, "output_layer", None)
    forward = getattr(model, "forward", None)
    takes = callable(forward) and "return_hidden" in inspect.signature(forward).parameters
    if not callable(find) or not takes:
        return None, f"{name} does not declare its output layer (no output_layer() and forward(x, return_hidden))"
    head = find()
    if head is None:
        kind = getattr(model, "model_type", None)
        from_hf = f" (transformers {kind})" if kind else ""
        return None, (f"{name}{from_hf} has no output layer whose product with the last hidden states is its logits "
                      "(transformers' llama, mistral, qwen2, qwen3 and gpt2 have: others may scale or cap their "
                      "logits after it)")
    if not isinstance(head, nn.Linear):
        return None, f"{name}'s output layer is a {type(head).__name__}, not an nn.Linear"
    return head, None


def head_problem(model: Any, peft: PeftConfig) -> tuple[str | None, int | None]:
    """Why the chunked loss cannot use ``model``'s output layer under ``peft`` (None: it can), and the vocabulary."""
    from torch import nn

    head, why = output_layer(model)
    if head is None:  # the vocabulary: the rows of the model's largest embedding
        modules = model.modules() if hasattr(model, "modules") else []
        return why, max((m.num_embeddings for m in modules if isinstance(m, nn.Embedding)), default=None)
    vocab = int(head.weight.shape[0])
    if peft.method is PeftMethod.qlora:
        _, root = adapter_root(model)
        try:
            targets = resolve_plan(model, peft).targets
        except PeftTargetError:
            return None, vocab  # the peft check names it
        name = next((n for n in targets if root.get_submodule(n) is head), None)
        if name is not None:
            # a LoRA adapter on the layer joins the chunked loss; QLoRA's 4-bit weight would be dequantised every step
            return (f"peft=qlora adapts the output layer {name}, whose base weight is stored in 4-bit NF4 (leave it "
                    "out of peft.target_modules, or use peft=lora)"), vocab
    return None, vocab


def loss_facts(model: Any, loss: LossConfig, peft: PeftConfig, data: dict[str, Any], traits: Any) -> LossFacts:
    """The facts ``loss.chunked`` is decided from, for ``model`` (on the meta device before the run, real at fit)."""
    from runner.losses import chunking_unavailable

    classifier = getattr(getattr(traits, "val_metric", None), "value", None) == "accuracy"  # one class per example
    batch, seq = data.get("batch_size"), data.get("seq_len")
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (batch, seq))
    sequences = 2 if getattr(traits, "pairs", False) else 1
    tokens = batch * seq * sequences if ints else None  # type: ignore[operator]  # None: the data does not say
    head, vocab = head_problem(model, peft)
    return LossFacts(loss.mode, loss.chunks, loss.chunked, classifier, head, chunking_unavailable(), tokens, vocab)


def _resolved(cfg: RunConfig) -> LossDecision | None:
    """The decision on the meta-device model; None where it does not build or is a LightningModule of your own."""
    import lightning as L

    if cfg.loss.mode is None or (cfg.loss.chunks is not None and cfg.loss.chunks < 1):
        return resolve_loss(LossFacts(cfg.loss.mode, cfg.loss.chunks, cfg.loss.chunked))  # no model needed
    model = target_objects.meta_model(cfg.model)
    if model is None or isinstance(model, L.LightningModule):
        return None
    return resolve_loss(loss_facts(model, cfg.loss, cfg.peft, target_objects.fields(cfg.data),
                                   target_objects.declared(cfg.data, "traits")))


def check_loss(cfg: RunConfig) -> str | None:
    decision = _resolved(cfg)
    return decision.refusal if decision is not None else None


def note_loss(cfg: RunConfig) -> str | None:
    """What the setting will not do, said once by the job; the fit resolves the same decision and only refuses."""
    decision = _resolved(cfg)
    return decision.note if decision is not None and decision.refusal is None else None


CHECKS = [check_loss]
NOTES = [note_loss]
