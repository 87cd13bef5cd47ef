"""Real fits of the model families runner builds from other libraries, through ``CompileStrategy`` on the CPU:
tiny transformers causal LMs (Llama-style, GPT-2-style) on variable-length text, a tiny BERT classifier on padded
labelled text, and timm models on images. Each returns per-step losses, the stack's figures, the batch lengths
and Dynamo's counters (graphs, graph breaks), so the tests compare them across scopes, shape policies and
saved-activation strategies."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch

from runner.config.schema import Background, CompileConfig, DynamicConfig, OffloadConfig, OptimizerPolicy, Scope
from runner.data.classification import TextClassificationDataModule
from runner.data.text import TextDataModule
from runner.stack.dynamic import resolve_pad_to
from runner.strategy import CompileStrategy
from runner.training.module import TrainModule
from tests.helpers import LossRecorder

SEQ_LEN = 64
# Overrides of a tiny model per family (runner.models.hf builds them from these, random weights). One layer:
# Dynamo and AOTAutograd trace every layer again (a second one doubled a fit's compile, 8 s to 16 s for Llama),
# and what these tests check (graph breaks, graphs per shape policy, losses against eager) is the same per layer.
CAUSAL = {
    "llama": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 1, "vocab_size": 256, "max_position_embeddings": SEQ_LEN},
    "gpt2": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 256,
             "max_position_embeddings": SEQ_LEN, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
}
BERT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "vocab_size": 257, "max_position_embeddings": SEQ_LEN, "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0}
# Dropout off: the comparisons below are of numbers, and dropout's random masks depend on the padded shape
# (and differ between eager and Inductor's RNG).


def corpus(directory: Path) -> Path:
    """Paragraphs of widely varying length (17-64 bytes), so per-document batches vary in length."""
    rng = random.Random(0)
    words = ["def", "class", "return", "import", "self", "value", "for", "in", "if", "else", "while", "yield"]
    paras = [" ".join(rng.choice(words) for _ in range(40))[:rng.randint(18, SEQ_LEN + 1)] for _ in range(400)]
    path = directory / "paragraphs.txt"
    path.write_text("\n\n".join(paras))
    return path


def labelled(directory: Path) -> Path:
    """Labelled lines of varying length: the label is which word the text repeats (learnable)."""
    rng = random.Random(1)
    words = ["alpha", "beta", "gamma", "delta"]
    lines = []
    for _ in range(600):
        label = rng.randrange(4)
        text = " ".join(words[label] if rng.random() < 0.5 else rng.choice(words) for _ in range(rng.randint(3, 10)))
        lines.append(f"{label}\t{text}")
    path = directory / "labelled.tsv"
    path.write_text("\n".join(lines))
    return path


@dataclass
class Fit:
    """What one fit leaves: per-step losses, the stack's figures, the batch lengths, Dynamo's counters."""

    losses: list[float]
    figures: dict[str, Any]
    lengths: list[int]
    graphs: int
    breaks: dict[str, int] = field(default_factory=dict)


def causal_module(family: str) -> TrainModule:
    from runner.models.hf import CausalLM

    torch.manual_seed(0)
    return TrainModule(CausalLM(config=family, overrides=CAUSAL[family]), optimizer=partial(torch.optim.AdamW, lr=3e-3))


def classifier_module() -> TrainModule:
    from runner.models.hf import SequenceClassifier

    torch.manual_seed(0)
    return TrainModule(SequenceClassifier(config="bert", overrides=BERT, num_labels=4),
                       optimizer=partial(torch.optim.AdamW, lr=3e-3))


def fit(module: L.LightningModule, data: L.LightningDataModule, scope: Scope = Scope.step, backend: str = "eager",
        dynamic: DynamicConfig | None = None, offload: OffloadConfig | None = None, steps: int = 8,
        block_types: tuple[str, ...] = (), optimizer: OptimizerPolicy = OptimizerPolicy.none) -> Fit:
    """Train ``module`` on ``data`` for ``steps`` through CompileStrategy (compiled from the first step)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    lengths: list[int] = []

    class Lengths(LossRecorder):
        def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                                 batch_idx: int) -> None:
            x = batch[0]["input_ids"] if isinstance(batch[0], dict) else batch[0]
            lengths.append(int(x.shape[-1]))

    rec = Lengths()
    cfg = CompileConfig(scope=scope, backend=backend, optimizer=optimizer, background=Background.disabled,
                        block_types=list(block_types))
    strategy = CompileStrategy(compile=cfg, dynamic=dynamic or DynamicConfig(), offload=offload, device="cpu")
    trainer = L.Trainer(accelerator="cpu", strategy=strategy, max_steps=steps, logger=False, limit_val_batches=0,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        gradient_clip_val=1.0, callbacks=[rec])
    trainer.fit(module, data)
    return Fit(rec.losses, strategy.stack.figures(), lengths, int(counters["stats"]["unique_graphs"]),
               {str(k): int(v) for k, v in counters["graph_break"].items()})


def text_data(path: Path, dynamic: DynamicConfig) -> TextDataModule:
    return TextDataModule(path=str(path), batching="documents", seq_len=SEQ_LEN, batch_size=2,
                          pad_to=resolve_pad_to(dynamic, SEQ_LEN))


def classification_data(path: Path, dynamic: DynamicConfig) -> TextClassificationDataModule:
    return TextClassificationDataModule(path=str(path), num_classes=4, seq_len=SEQ_LEN, min_len=4, batch_size=4,
                                        pad_to=resolve_pad_to(dynamic, SEQ_LEN))
