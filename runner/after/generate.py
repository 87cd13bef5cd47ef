"""Text from a trained causal LM (runner's GPT or a transformers model), from a checkpoint or an export, and the
sample a causal-LM run writes into report.md: decoded with a KV cache, seeded, the random state restored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from runner.after.family import Family, Tokens, family_of, writes_text
from runner.config import ConfigError


@dataclass(frozen=True)
class Sampling:
    """How new tokens are drawn: ``temperature`` 0 is greedy, ``top_k`` 0 keeps every token; stop at ``eos_id``."""

    max_new_tokens: int = 200
    temperature: float = 0.8
    top_k: int = 40
    seed: int = 0
    eos_id: int | None = None

    def error(self) -> str | None:
        """What is wrong with these settings, in one paragraph (None: nothing)."""
        if self.max_new_tokens < 1:
            return f"--max-new-tokens {self.max_new_tokens}: give a number of tokens to write, >= 1."
        if self.temperature < 0:
            return f"--temperature {self.temperature}: give 0 (greedy) or more (1 samples as the model says)."
        if self.top_k < 0:
            return f"--top-k {self.top_k}: give 0 (every token) or the number of likeliest tokens to draw from."
        return None


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


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd for the sample; each submodule's mode restored after."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, training in modes:
            m.training = training


def generate_ids(model: nn.Module, prompt: list[int], sampling: Sampling) -> list[int]:
    """The new token ids ``model`` (runner's GPT or ``runner.models.hf.CausalLM``) writes after ``prompt``."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    with _eval_mode(model), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(sampling.seed)
        if family_of(model) is Family.hf_causal_lm:
            return _hf_generate(model.model, ids, sampling)  # type: ignore[arg-type]
        return _gpt_generate(model, ids, sampling)


def _hf_generate(hf: nn.Module, ids: torch.Tensor, sampling: Sampling) -> list[int]:
    config: Any = hf.config
    pad = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    sample = sampling.temperature > 0
    # Greedy decoding reads neither the temperature nor top-k: given anyway, transformers warns on every call.
    drawn = {"temperature": sampling.temperature, "top_k": sampling.top_k} if sample else {}
    out = hf.generate(  # type: ignore[operator]
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=sampling.max_new_tokens,
        do_sample=sample, **drawn, use_cache=True, pad_token_id=pad if pad is not None else 0,
        **({"eos_token_id": sampling.eos_id} if sampling.eos_id is not None else {}))
    return [int(i) for i in out[0, ids.shape[1]:]]


def _gpt_generate(model: nn.Module, ids: torch.Tensor, sampling: Sampling) -> list[int]:
    from runner.models.gpt import GPT, KVCache

    assert isinstance(model, GPT), "writes_text: runner's GPT or a transformers causal LM"
    start, cache, new = ids.shape[1], KVCache(), ids[:, -model.block_size:]
    for _ in range(sampling.max_new_tokens):
        # Past block_size the GPT's absolute positions all shift with each token: run the window whole, as in training.
        if cache.length + new.shape[1] > model.block_size:
            cache, new = KVCache(), ids[:, -model.block_size:]
        logits = model.decode(new, cache, last_only=True)[:, -1, :].float()
        new = next_token(logits, sampling)
        ids = torch.cat([ids, new], dim=1)
        if sampling.eos_id is not None and int(ids[0, -1]) == sampling.eos_id:
            break
    return [int(i) for i in ids[0, start:]]


def next_token(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """One token per row of ``logits`` ``[batch, vocab]``, as ``sampling`` says (the global generator)."""
    if sampling.temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits / sampling.temperature
    if 0 < sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1)


def write_text(model: nn.Module, tokens: Tokens, prompt: str, sampling: Sampling, special: bool = True) -> str:
    """``prompt``'s continuation, as text; ``special``: the prompt's ids with the tokenizer's special tokens."""
    ids = tokens.encode(prompt or "\n", special)
    if not ids:
        ids = tokens.encode("\n")
    new = generate_ids(model, ids, sampling)
    if sampling.eos_id is not None and new and new[-1] == sampling.eos_id:
        new = new[:-1]  # the answer ended
    return tokens.decode(new)


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
