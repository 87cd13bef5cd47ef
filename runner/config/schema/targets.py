"""Typed schemas of the open ``_target_`` nodes runner ships, each registered under :func:`schema_name` and extended
by its option's YAML, so a misspelt key fails at composition (a user's own class has none: conf/model/custom.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from runner.config.schema.data import (
    ImageDataSchema,
    InstructDataSchema,
    PreferenceDataSchema,
    SyntheticDataSchema,
    TextClassificationDataSchema,
    TextDataSchema,
    TokenizedTextDataSchema,
)
from runner.config.schema.families import HFCausalLMSchema, HFClassifierSchema, TimmSchema


class OnResume(Enum):
    """What a resume that asks for another ``trainer.max_steps`` does to the learning-rate schedule
    (``runner.training.schedules``; docs/after-training.md says why ``keep`` is the default)."""

    keep = "keep"  # the plan the run started with; steps past its end hold its final rate
    stretch = "stretch"  # the rest of the plan, from the resume step, stretched to end at the new max_steps


@dataclass
class GPTSchema:
    """A small decoder-only transformer (``runner.models.gpt.GPT``)."""

    _target_: str = "runner.models.gpt.GPT"
    vocab_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 256  # Longest sequence the position embedding covers.
    dropout: float = 0.0
    bias: bool = False


@dataclass
class MLPSchema:
    """A small MLP classifier for fast checks (``runner.models.mlp.MLP``)."""

    _target_: str = "runner.models.mlp.MLP"
    in_features: int = 32
    hidden: int = 256
    depth: int = 4
    out_features: int = 10


@dataclass
class AdamWSchema:
    """``torch.optim.AdamW``, built later with the model's parameters (``_partial_``)."""

    _target_: str = "torch.optim.AdamW"
    _partial_: bool = True
    lr: float = 3e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.1
    eps: float = 1e-8


@dataclass
class SGDSchema:
    """``torch.optim.SGD`` (``_partial_``)."""

    _target_: str = "torch.optim.SGD"
    _partial_: bool = True
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 0.0


@dataclass
class WarmupCosineSchema:
    """Linear warm-up then cosine decay (``runner.training.schedules.warmup_cosine``)."""

    _target_: str = "runner.training.schedules.warmup_cosine"
    _partial_: bool = True
    warmup_steps: int = 20
    total_steps: Any = "${trainer.max_steps}"
    min_lr_ratio: float = 0.1
    # A resume with another trainer.max_steps: keep the run's plan (steps past its end hold the final rate), or stretch
    # the rest of it to end at the new max_steps. A warning says which; so does the run's summary.
    on_resume: OnResume = OnResume.keep


@dataclass
class CSVLoggerSchema:
    _target_: str = "lightning.pytorch.loggers.CSVLogger"
    save_dir: str = "${run_dir}"
    name: str = "csv"
    version: str = ""


@dataclass
class WandbLoggerSchema:
    """wandb, offline by default (no network): ``wandb sync <run_dir>/wandb/offline-run-*``."""

    _target_: str = "lightning.pytorch.loggers.WandbLogger"
    save_dir: str = "${run_dir}"
    project: str = "runner"
    name: str = "${name}"
    offline: bool = True


@dataclass
class TensorBoardLoggerSchema(CSVLoggerSchema):
    _target_: str = "lightning.pytorch.loggers.TensorBoardLogger"
    name: str = "tensorboard"


# The schema of each option runner ships in the open groups: group -> option -> dataclass.
_TARGET_SCHEMAS: dict[str, dict[str, type]] = {
    "model": {"gpt": GPTSchema, "mlp": MLPSchema,
              "hf_causal_lm": HFCausalLMSchema, "hf_classifier": HFClassifierSchema, "timm": TimmSchema},
    "data": {"text": TextDataSchema, "synthetic": SyntheticDataSchema,
             "text_classification": TextClassificationDataSchema, "tokenized_text": TokenizedTextDataSchema,
             "images": ImageDataSchema, "instruct": InstructDataSchema,
             "preference": PreferenceDataSchema},
    "optimizer": {"adamw": AdamWSchema, "sgd": SGDSchema},
    "scheduler": {"warmup_cosine": WarmupCosineSchema},
    "logger": {"csv": CSVLoggerSchema, "wandb": WandbLoggerSchema, "tensorboard": TensorBoardLoggerSchema},
}


def target_schemas() -> dict[str, dict[str, type]]:
    """Group -> option -> the schema dataclass that option's YAML extends (a copy)."""
    return {group: dict(options) for group, options in _TARGET_SCHEMAS.items()}


def schema_name(option: str) -> str:
    """The name an option's schema is stored under in its group (``gpt`` -> ``gpt_schema``), never an option a user
    picks."""
    return f"{option}_schema"


def is_schema_name(group: str, name: str) -> bool:
    """Whether ``group/name`` is one of the stored schemas rather than an option file."""
    return any(schema_name(option) == name for option in _TARGET_SCHEMAS.get(group, {}))
