"""Checks of the data against the model (classes, token ids, packed rows), quiet where either side declares nothing
(a user's own classes)."""

from __future__ import annotations

from runner.config import target_objects
from runner.config.schema import RunConfig
from runner.config.target_objects import Embedding, TokenRange, declared_or_none


def check_vocabulary(cfg: RunConfig) -> str | None:
    """The data's largest token id and pad id are rows of the model's input embedding (a larger id fails in the first
    forward)."""
    ids, embedding = declared_or_none(cfg.data, "token_range"), declared_or_none(cfg.model, "input_vocabulary")
    if not isinstance(ids, TokenRange) or not isinstance(embedding, Embedding):
        return None
    largest = max(ids.largest, ids.pad)
    if largest < embedding.rows:
        return None
    head = (f"The data's token ids go up to {ids.largest} and pad with id {ids.pad} ({ids.source}), but the model "
            f"embeds {embedding.rows} ids, 0-{embedding.rows - 1} ({embedding.source}): a larger id would fail "
            "inside the model's embedding.")
    if embedding.setting is None:  # a saved model: its size is fixed; its own tokenizer fits it
        return (f"{head} Tokenize with the model's own tokenizer (drop data.tokenizer: with model.path it is the "
                f"default), or give data.tokenizer a tokenizer of at most {embedding.rows} ids.")
    return (f"{head} Set {embedding.setting}={largest + 1} so that the model embeds every id, or give data.tokenizer "
            f"a tokenizer of at most {embedding.rows} ids (data.tokenizer=bytes: UTF-8 bytes).")


def check_labels(cfg: RunConfig) -> str | None:
    """The classes the rows hold are the classes the model predicts (``model.num_labels``, else
    ``data.num_classes``)."""
    found = declared_or_none(cfg.data, "label_count")
    if not isinstance(found, tuple):
        return None
    count, examples = found
    model, data = target_objects.fields(cfg.model), target_objects.fields(cfg.data)
    path = data.get("path")
    settings = (("model.num_labels", model.get("num_labels")), ("data.num_classes", data.get("num_classes")))
    for setting, value in settings:
        if isinstance(value, int) and not isinstance(value, bool) and value != count:
            where = f"data.path={path}" if path else "the stdlib task"
            follows = " (it follows data.num_classes)" if setting == "model.num_labels" else ""
            return (f"{where} holds {count} classes (labels {examples}), but {setting}={value}{follows}: the model "
                    f"would predict {value} classes. Set data.num_classes={count}"
                    + (", and model.num_labels with it if you set it yourself." if follows else "."))
    return None


def check_packing(cfg: RunConfig) -> str | None:
    """Packed rows only with a model whose attention takes a document mask, and FlexAttention only on CUDA."""
    if target_objects.fields(cfg.data).get("packing") is not True:
        return None
    model = target_objects.fields(cfg.model)
    target = model.get("_target_")
    cls = target_objects.locate(target)[0] if isinstance(target, str) else None
    if cls is None:
        return None  # the import check names it
    if not callable(getattr(cls, "packing_refusal", None)):
        return (f"data.packing=true with model._target_={target}, which does not say it takes packed rows: a packed "
                "row holds several examples, and a model that does not read their position ids and document mask "
                "would attend across them. The models that do: runner's GPT (model=gpt) and transformers' Llama "
                "family (model=hf_causal_lm model.config=llama|qwen2|qwen3); a model of your own declares it with a "
                "static packing_refusal() returning None and reads runner.packing.PackedInputs. Or drop "
                "data.packing.")
    refusal = declared_or_none(cfg.model, "packing_refusal")
    if isinstance(refusal, str):
        return refusal
    if model.get("attn_implementation") == "flex_attention" and cfg.trainer.accelerator == "cpu":
        return ("data.packing=true with model.attn_implementation=flex_attention on the CPU: torch's FlexAttention "
                "has no backward on the CPU (torch 2.13). Use model.attn_implementation=sdpa (the same document "
                "mask, dense), or train on a GPU (trainer=gpu).")
    return None


CHECKS = [check_vocabulary, check_labels, check_packing]
