"""Text from a trained causal LM (runner's GPT or a transformers model), from a checkpoint or an export, and the
sample a causal-LM run writes into report.md: every prompt at once through ``runner.models.decode``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from torch import nn

from runner.after.family import Family, Tokens, family_of, writes_text
from runner.config import ConfigError
from runner.models.decode import Decoder, Generated, Sampling

__all__ = ["Sampling", "generate_ids", "generation_error", "open_export", "write_text", "write_texts"]


def not_a_language_model(what: str, kind: str) -> str:
    """The refusal of ``generate`` on ``what`` (a run or an export), which holds ``kind`` of model."""
    return (f"{what} holds {kind}, not a causal language model: generate writes text with runner's GPT (model=gpt) "
            "or a transformers causal LM (model=hf_causal_lm). Evaluate a classifier with "
            "`python -m runner eval RUN_DIR` instead.")


def generation_error(model: nn.Module, what: str) -> str | None:
    """Why ``model`` (of ``what``: a run or an export) cannot write text, or None."""
    if writes_text(model):
        return None
    kind = {Family.hf_classifier: "a transformers sequence classifier", Family.timm: "a timm image classifier"}.get(
        family_of(model), f"a {type(model).__name__}")
    return not_a_language_model(what, kind)


def generate_ids(model: nn.Module, prompt: list[int], sampling: Sampling) -> list[int]:
    """The new token ids ``model`` (runner's GPT or ``runner.models.hf.CausalLM``) writes after ``prompt``, eagerly."""
    return Decoder(model, compile=False).generate([prompt], sampling).tokens[0]


def write_texts(model: nn.Module, tokens: Tokens, prompts: Sequence[str], sampling: Sampling, special: bool = True,
                backend: str | None = None) -> tuple[list[str], Generated]:
    """Each prompt's continuation, as text, all written at once; ``special``: the prompts' ids with the tokenizer's
    special tokens; ``backend``: compiled with this ``torch.compile`` backend (None: eager)."""
    ids = [tokens.encode(prompt or "\n", special) or tokens.encode("\n") for prompt in prompts]
    on_gpu = next(model.parameters()).device.type == "cuda"
    # On a GPU, Inductor's reduce-overhead mode replays each step as one CUDA graph: the launches are the step's cost.
    mode = "reduce-overhead" if on_gpu and backend == "inductor" else None
    out = Decoder(model, compile=backend is not None, backend=backend or "inductor", mode=mode).generate(ids, sampling)
    return [tokens.decode(new) for new in out.tokens], out


def write_text(model: nn.Module, tokens: Tokens, prompt: str, sampling: Sampling, special: bool = True) -> str:
    """``prompt``'s continuation, as text."""
    return write_texts(model, tokens, [prompt], sampling, special)[0][0]


def open_export(directory: Path) -> tuple[nn.Module, Tokens]:
    """A causal LM exported by runner, loaded with its family's library, and how text becomes its ids."""
    from runner.after.export import METADATA

    meta = json.loads((directory / METADATA).read_text())
    tokens = Tokens(str(directory)) if (directory / "tokenizer_config.json").is_file() else Tokens()
    if meta.get("task") != "causal_lm":
        raise ConfigError(not_a_language_model(str(directory), f"an export of a {meta.get('task')} model "
                                                                   f"({meta.get('family')})"))
    if meta.get("tokenizer") is None:
        raise ConfigError(f"{directory} holds no tokenizer (its run's data module made its own ids): generate cannot "
                          "turn a prompt into them. Load the model with transformers and sample it with the "
                          "tokenizer that makes those ids.")
    from runner.after.adapter_export import load_causal_lm, open_adapter_export

    if meta.get("adapter"):  # a LoRA run's export: its base, and the adapter applied to it
        return open_adapter_export(directory, meta), tokens
    return load_causal_lm(directory, meta.get("family")), tokens
