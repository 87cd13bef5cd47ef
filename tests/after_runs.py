"""Tiny real runs for the after-training tests (export, eval, generate, resume): ``run(cfg)`` in-process, a few
steps, no compile codegen, with the ``.hydra/`` files Hydra writes beside a run, and the trained module kept."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from omegaconf import OmegaConf

from runner.config import compose, load
from runner.run import run

FAST = ["trainer.max_steps=3", "trainer.val_check_interval=3", "trainer.limit_val_batches=1",
        "trainer.enable_progress_bar=false", "telemetry.speedup_steps=0", "compile.background=disabled"]
"""A few steps, one validation batch, no eager/compiled pairs: seconds."""
GPT = ["+recipe=smoke", "compile=model", "compile.backend=eager", "data.max_bytes=40000", *FAST]
"""runner's tiny GPT on byte-level text, its forward compiled in place (Dynamo, eager backend)."""
LLAMA = ["model=hf_causal_lm", "compile=eager", "data.seq_len=32", "data.batch_size=4", "data.max_bytes=40000",
         "model.overrides.hidden_size=32", "model.overrides.intermediate_size=64",
         "model.overrides.num_hidden_layers=2", "model.overrides.num_attention_heads=2",
         "+model.overrides.num_key_value_heads=1", *FAST]
"""A tiny Llama-style transformers causal LM on byte-level text, eager."""
CLASSES = ("alpha", "beta", "gamma", "delta")


def bert(data: Path) -> list[str]:
    """A tiny BERT classifier on the labelled JSON lines ``data``, eager."""
    return ["+recipe=bert_classify", "compile=eager", f"data.path={data}", "data.seq_len=32", "data.batch_size=8",
            "model.overrides.hidden_size=32", "model.overrides.intermediate_size=64",
            "model.overrides.num_hidden_layers=1", "model.overrides.num_attention_heads=2", *FAST]


def labelled_jsonl(path: Path, rows: int = 240, columns: tuple[str, str] = ("text", "label"),
                   classes: tuple[str, ...] = CLASSES) -> Path:
    """Labelled JSON lines whose label is the word the text repeats (learnable), in the given columns."""
    import random

    rng = random.Random(len(classes) + rows)
    lines = []
    for _ in range(rows):
        label = rng.randrange(len(classes))
        words = [classes[label] if rng.random() < 0.6 else rng.choice(classes) for _ in range(rng.randint(4, 9))]
        lines.append(json.dumps({columns[0]: " ".join(words), columns[1]: classes[label]}))
    path.write_text("\n".join(lines) + "\n")
    return path


class _Keep(Callback):
    """Keeps the trained LightningModule (``run`` returns figures, not the module)."""

    module: L.LightningModule | None = None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.module = pl_module


@dataclass
class TrainedRun:
    """A finished run: its directory, figures, and the module as the fit left it."""

    run_dir: Path
    figures: dict[str, Any]
    module: L.LightningModule


def train(run_dir: Path, overrides: list[str]) -> TrainedRun:
    """Train in-process and write ``.hydra/overrides.yaml`` and ``config.yaml`` as Hydra does for a run."""
    composed = compose(overrides, run_dir=str(run_dir))
    keep = _Keep()
    result = run(load(composed), extra_callbacks=[keep])
    hydra = run_dir / ".hydra"
    hydra.mkdir(parents=True, exist_ok=True)
    (hydra / "overrides.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(list(overrides))))
    (hydra / "config.yaml").write_text(OmegaConf.to_yaml(composed))
    assert keep.module is not None
    return TrainedRun(run_dir, result.figures, keep.module)
