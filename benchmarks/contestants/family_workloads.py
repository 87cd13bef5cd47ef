"""The model families of ``families.py`` as ``compare.py`` workloads: each recipe's model on the recipe's data,
fixed-shape batches (every contestant sees the same tensors; the variable-length case is the tests' and
``dynamic_shapes.py``'s): Llama-style and GPT-2-style transformers causal LMs on packed stdlib bytes, BERT on the
stdlib classification task padded to its longest length, timm's ResNet-18 and ViT-Tiny on synthetic images."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import nn

from contestants.workload import Workload

FAMILIES = ("llama", "gpt2", "bert", "resnet18", "vit_tiny")
# The recipes' sizes (recipes/*.yaml, conf/model/hf_*.yaml), dropout off as in the recipes.
CAUSAL = {
    "llama": {"hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 4, "num_attention_heads": 4,
              "vocab_size": 256},
    "gpt2": {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 256,
             "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
}
BERT = {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "vocab_size": 257, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def _causal(name: str, seq_len: int) -> nn.Module:
    from runner.models.hf import CausalLM

    return CausalLM(config=name, overrides={**CAUSAL[name], "max_position_embeddings": seq_len})


def _bert(seq_len: int) -> nn.Module:
    from runner.models.hf import SequenceClassifier

    return SequenceClassifier(config="bert", overrides={**BERT, "max_position_embeddings": seq_len}, num_labels=4)


def _timm(name: str, **kwargs: Any) -> nn.Module:
    from runner.models.image import ImageClassifier

    return ImageClassifier(name=name, num_classes=10, overrides=kwargs)


def _padded(items: list[tuple[torch.Tensor, int]], length: int) -> list[tuple[dict[str, torch.Tensor], int]]:
    out = []
    for ids, label in items:
        x = torch.zeros(length, dtype=torch.long)
        mask = torch.zeros(length, dtype=torch.long)
        x[:len(ids)], mask[:len(ids)] = ids, 1
        out.append(({"input_ids": x, "attention_mask": mask}, label))
    return out


def family_workload(name: str, quick: bool) -> Workload:
    """The workload ``name`` (one of ``FAMILIES``); ``quick``: tiny data and batches (plumbing)."""
    if name in CAUSAL:
        from runner.data.text import TextDataModule

        seq, batch = (32, 2) if quick else (128, 8)
        dm = TextDataModule(seq_len=seq, batch_size=batch, max_bytes=20_000 if quick else 4_000_000)
        dm.setup("fit")
        return Workload(name, f"transformers {name} ({CAUSAL[name]['hidden_size']} wide, "
                        f"{CAUSAL[name]['num_hidden_layers']} layers), packed bytes, seq {seq}, batch {batch}",
                        partial(_causal, name, seq), dm.train_dataloader().dataset, batch)
    if name == "bert":
        from runner.data.classification import TextClassificationDataModule

        seq, batch = (32, 2) if quick else (128, 16)
        cls = TextClassificationDataModule(seq_len=seq, batch_size=batch, max_examples=400 if quick else 20_000)
        cls.setup("fit")
        assert cls._train is not None
        return Workload(name, f"transformers bert (128 wide, 2 layers), stdlib classification padded to {seq}, "
                        f"batch {batch}", partial(_bert, seq), _padded(cls._train, seq), batch)  # type: ignore[arg-type]
    from runner.data.images import SyntheticImages

    size, batch = (32, 2) if quick else (64, 32)
    data = SyntheticImages(256 if quick else 4096, size, 10, seed=0)
    if name == "resnet18":
        return Workload(name, f"timm resnet18, synthetic {size}x{size} images, batch {batch}",
                        partial(_timm, "resnet18"), data, batch)
    return Workload(name, f"timm vit_tiny_patch16_224 at {size}x{size}, synthetic images, batch {batch}",
                    partial(_timm, "vit_tiny_patch16_224", img_size=size), data, batch)
