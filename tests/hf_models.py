"""Saved transformers models for the tests, made offline: a tiny model from its configuration and a byte-level
BPE tokenizer trained on a few lines of text, written where ``save_pretrained`` writes them."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

TEXT = ["def add(a, b):\n    return a + b\n", "The quick brown fox jumps over the lazy dog.\n",
        "import os\nprint(os.getcwd())\n", "class A:\n    pass\n"] * 20


def save_tokenizer(directory: Path, vocab_size: int = 320) -> int:
    """A byte-level BPE tokenizer with <pad>, saved into ``directory``; returns its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXT, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.save_pretrained(directory)
    return len(fast)


def save_model(directory: Path, task: str = "causal_lm", model_type: str = "llama", hidden_size: int = 32,
               vocab_size: int = 320, max_positions: int = 128) -> Path:
    """A tiny ``model_type`` model for ``task`` (causal_lm or sequence_classification) and its tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    directory.mkdir(parents=True, exist_ok=True)
    vocab = save_tokenizer(directory, vocab_size)
    sizes = dict(hidden_size=hidden_size, num_hidden_layers=2, num_attention_heads=2, vocab_size=vocab,
                 max_position_embeddings=max_positions, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    if model_type != "gpt2":
        sizes["intermediate_size"] = 2 * hidden_size
    cfg = AutoConfig.for_model(model_type, **sizes)
    auto = AutoModelForCausalLM if task == "causal_lm" else AutoModelForSequenceClassification
    auto.from_config(cfg).save_pretrained(directory)
    return directory


@functools.cache
def saved_llama() -> Path:
    """A tiny saved Llama and its tokenizer, made once per process (for composition tests)."""
    return save_model(Path(tempfile.mkdtemp(prefix="runner-saved-llama-")))


def vision_imports() -> bool:
    """Whether timm (and the torchvision it imports) imports beside this torch. PyPI's torchvision pairs with
    PyPI's torch; next to the local CPU-only torch of ``make setup`` it does not (docs/vision.md)."""
    try:
        import timm  # noqa: F401
    except Exception:
        return False
    return True



def refused_without_vision(cfg: Any) -> bool:
    """Whether ``cfg`` (composed) selects a timm model where timm does not import; if so, check that loading it is
    refused up front with the install line (docs/vision.md), as a machine without CUDA refuses trainer=gpu."""
    import pytest

    from runner.config import ConfigError, load

    target = str(getattr(getattr(cfg, "model", None), "_target_", ""))
    if vision_imports() or "runner.models.image" not in target:
        return False
    with pytest.raises(ConfigError, match=r"runner\[vision\]"):
        load(cfg)
    return True
