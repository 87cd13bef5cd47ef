"""What a trained model is, for what comes after training: its family (how it is saved and loaded), whether it
writes text, its tokenizer (the run's data's, bytes for runner's byte-level data, else ``model.path``'s) and its
class names."""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from torch import nn

from runner.config.schema import RunConfig
from runner.config.schema.targets import (
    InstructDataSchema,
    PreferenceDataSchema,
    TextClassificationDataSchema,
    TextDataSchema,
)
from runner.telemetry.data_report import read_labels


class Family(Enum):
    """How a model is exported and loaded again."""

    hf_causal_lm = "hf_causal_lm"  # transformers: save_pretrained / AutoModelForCausalLM.from_pretrained
    hf_classifier = "hf_classifier"  # transformers: save_pretrained / AutoModelForSequenceClassification
    timm = "timm"  # timm: model.safetensors + config.json (pretrained_cfg) / timm.create_model + load_state_dict
    state_dict = "state_dict"  # runner's GPT and MLP, a user's module: model.safetensors + the config node


def family_of(model: nn.Module) -> Family:
    """The family of the model runner trained (``TrainModule.model``, or a user's LightningModule)."""
    from runner.models.hf import CausalLM, SequenceClassifier
    from runner.models.image import ImageClassifier

    if isinstance(model, CausalLM):
        return Family.hf_causal_lm
    if isinstance(model, SequenceClassifier):
        return Family.hf_classifier
    if isinstance(model, ImageClassifier):
        return Family.timm
    return Family.state_dict


def writes_text(model: nn.Module) -> bool:
    """Whether the model is a causal LM runner can sample from: runner's GPT or a transformers causal LM."""
    from runner.models.gpt import GPT
    from runner.models.hf import CausalLM

    return isinstance(model, (GPT, CausalLM))


@dataclass(frozen=True)
class Tokens:
    """How text becomes the model's ids: a saved tokenizer (``directory``) or UTF-8 bytes plus ``offset``."""

    directory: str | None = None
    offset: int = 0
    max_length: int | None = None  # where the run cut its texts (a classifier's data.seq_len)

    @property
    def note(self) -> str:
        """What the ids are, in words (an export's README and metadata say it)."""
        if self.directory:
            return f"the Hugging Face tokenizer saved in {self.directory} (exported beside the model)"
        pad = ", 0 pads" if self.offset else ""
        return f"byte-level: ids are the UTF-8 bytes of the text{f' + {self.offset}' if self.offset else ''}{pad}"

    def save(self, out: Path) -> bool:
        """The tokenizer into ``out``: the saved one, or the byte ids as one; False without transformers."""
        if self.directory:
            self.tokenizer().save_pretrained(out)
            return True
        if importlib.util.find_spec("transformers") is None:
            return False
        from runner.data.tokens.byte_tokenizer import byte_tokenizer

        byte_tokenizer(self.offset, self.max_length).save_pretrained(out)
        return True

    def tokenizer(self) -> Any:
        """The saved tokenizer, loaded from local files (only when ``directory`` is set)."""
        assert self.directory, "a byte-level model has no tokenizer"
        return _saved_tokenizer(self.directory)

    def encode(self, text: str, special: bool = True) -> list[int]:
        """``text``'s ids; ``special``: with the tokenizer's special tokens (its BOS), as a prompt's first piece was."""
        if self.directory:
            return list(self.tokenizer()(text, add_special_tokens=special)["input_ids"])
        return [b + self.offset for b in text.encode("utf-8")]

    def decode(self, ids: list[int]) -> str:
        if self.directory:
            return str(self.tokenizer().decode(ids, skip_special_tokens=True))
        return bytes(max(0, min(255, i - self.offset)) for i in ids).decode("utf-8", "replace")


@functools.cache
def _saved_tokenizer(directory: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Path(directory).expanduser()), local_files_only=True)


def tokens_of(cfg: RunConfig) -> Tokens | None:
    """How the run's data turned text into ids (module docstring); None when it read no text."""
    directory = getattr(cfg.data, "tokenizer", None)
    if directory:
        return Tokens(str(directory))
    if isinstance(cfg.data, (TextDataSchema, InstructDataSchema, PreferenceDataSchema)):
        return Tokens()
    if isinstance(cfg.data, TextClassificationDataSchema):
        return Tokens(offset=1, max_length=cfg.data.seq_len)
    path = getattr(cfg.model, "path", None)
    return Tokens(str(path)) if path else None


def label_names(run_dir: Path, num_classes: int) -> list[str]:
    """Class names by id: ``<run_dir>/labels.json``'s ``id2label`` where the data wrote one, else ``"0"``..``"n-1"``."""
    id2label = read_labels(run_dir).get("id2label") or {}
    return [str(id2label.get(str(i), id2label.get(i, i))) for i in range(num_classes)]


