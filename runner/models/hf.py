"""Hugging Face ``transformers`` models as runner models, built without network access."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from runner.config.target_objects import Embedding
from runner.models import hf_checks, hf_packing
from runner.packing import PackedInputs
from runner.torch_internals import nf4

log = logging.getLogger(__name__)

_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "sep_token_id")

# transformers model types whose logits are ``lm_head(last_hidden_state)`` and nothing more (checked against their own
# forward in ``tests/test_chunked_loss.py``)
LOSS_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gpt2")


def _given(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The overrides to apply: a null value leaves the family's default (so one YAML serves several families:
    ``intermediate_size: null`` for GPT-2, which has ``n_inner`` instead)."""
    return {str(k): v for k, v in dict(overrides or {}).items() if v is not None}


def build_config(config: str, overrides: Mapping[str, Any] | None = None, **fixed: Any) -> Any:
    """The ``transformers`` configuration ``config`` names (a model type or class name), ``overrides`` applied."""
    cls = hf_checks.config_class(config)
    values = {**_given(overrides), **fixed}
    vocab = values.get("vocab_size")
    if isinstance(vocab, int):
        defaults = cls()
        for key in _TOKEN_IDS:
            default = getattr(defaults, key, None)
            if key not in values and isinstance(default, int) and default >= vocab:
                values[key] = None
    return cls(**values)


def input_vocabulary(config: str | None, path: str | None, overrides: Mapping[str, Any] | None) -> Embedding | None:
    """How many token ids a transformers model embeds (a saved one's config.json, or the configuration's), or None."""
    try:
        if path:
            saved = json.loads((Path(path).expanduser() / "config.json").read_text())
            size = saved.get("vocab_size") or (saved.get("text_config") or {}).get("vocab_size")
            return Embedding(int(size), f"model.path={path} (its config.json: vocab_size {size})", None) \
                if size else None
        if config:
            size = build_config(config, overrides).vocab_size
            return Embedding(int(size), f"model.config={config} with vocab_size {size}", "model.overrides.vocab_size")
    except Exception:  # a model that does not build: hf_checks names the problem
        return None
    return None


# The unused settings this process said once: the checks build the model on the meta device, the run again
_NOTED: set[tuple[str, ...]] = set()


class _Transformers(nn.Module):
    """What both wrappers share: a saved model (``path``) or one built from a configuration, and their checks."""

    adapter_root = "model"  # peft's key names are relative to the transformers model (runner.config.decisions.peft)
    task = "causal_lm"  # hf_checks.check_model's task

    def __init__(self, auto_class: str, config: str | None, path: str | None, overrides: Mapping[str, Any] | None,
                 attn_implementation: str, **fixed: Any) -> None:
        super().__init__()
        with nf4.torchao_import_quiet():  # transformers' modeling code imports torchao wherever it is installed
            import transformers
            import transformers.modeling_utils  # noqa: F401

            auto = getattr(transformers, auto_class)
        self.source = path or config or "?"
        self.attn_implementation = attn_implementation
        if path:
            meta = torch.get_default_device().type == "meta"  # the config checks build shapes only
            unused = [f"config={config}"] if config else []
            unused += [f"overrides.{k}" for k in _given(overrides)]
            if unused and not meta and (path, *unused) not in _NOTED:
                _NOTED.add((path, *unused))
                log.info("model.path=%s: the saved model's own configuration is used; %s (for building from a "
                         "configuration) not applied", path, ", ".join(unused))
            root = Path(path).expanduser()
            if not root.is_dir():
                raise FileNotFoundError(f"model.path={path} is not a directory (hf_checks.check_path says what to do)")
            if meta:  # transformers refuses from_pretrained under a meta device (it would read the weights)
                saved = transformers.AutoConfig.from_pretrained(str(root), local_files_only=True, **fixed)
                self.model = auto.from_config(saved, attn_implementation=attn_implementation)
            else:  # a saved classifier's head may have another number of labels than the data: a new head then
                mismatched = {"ignore_mismatched_sizes": True} if fixed else {}
                self.model = auto.from_pretrained(str(root), local_files_only=True,
                                                  attn_implementation=attn_implementation, **fixed, **mismatched)
            # Train mode: from_pretrained returns eval mode, and Lightning keeps the modes it finds (no dropout).
            self.model.train()
        else:
            assert config, "model.config or model.path (checked before the run)"
            self.model = auto.from_config(build_config(config, overrides, **fixed),
                                          attn_implementation=attn_implementation)

    @classmethod
    def check_arguments(cls, config: str | None = None, path: str | None = None,
                        overrides: Mapping[str, Any] | None = None, **_: Any) -> str | None:
        """What is wrong with these arguments, in one paragraph, before anything is written (None: nothing)."""
        return hf_checks.check_model(cls.task, config, path, _given(overrides))

    @staticmethod
    def input_vocabulary(config: str | None = None, path: str | None = None,
                         overrides: Mapping[str, Any] | None = None, **_: Any) -> Embedding | None:
        """How many token ids the model embeds (the vocabulary check compares the data's ids with it)."""
        return input_vocabulary(config, path, _given(overrides))


class CausalLM(_Transformers):
    """Any ``transformers`` causal LM (``AutoModelForCausalLM``): ``forward(input_ids)`` returns logits."""

    adapter_task = "CAUSAL_LM"  # peft's task_type, written into adapter_config.json

    def __init__(self, config: str | None = "llama", path: str | None = None,
                 overrides: Mapping[str, Any] | None = None, attn_implementation: str = "sdpa") -> None:
        super().__init__("AutoModelForCausalLM", config, path, overrides, attn_implementation)

    @staticmethod
    def packing_refusal(config: str | None = None, path: str | None = None,
                        overrides: Mapping[str, Any] | None = None, attn_implementation: str = "sdpa",
                        **_: Any) -> str | None:
        """Why this model cannot train on packed rows (None: it can)."""
        return hf_packing.packing_refusal(config, path, _given(overrides), attn_implementation)

    @property
    def model_type(self) -> str:
        """The transformers model type (``llama``, ``gpt2``...)."""
        return str(getattr(self.model.config, "model_type", "?"))

    def output_layer(self) -> nn.Module | None:
        """``lm_head``, whose product with the last hidden states is the logits, for ``LOSS_FAMILIES``; None for other
        families (their logits may be scaled or capped after the head)."""
        if self.model_type not in LOSS_FAMILIES:
            return None
        head = self.model.get_output_embeddings()  # type: ignore[operator]
        return head if isinstance(head, nn.Module) else None

    def forward(self, input_ids: torch.Tensor | PackedInputs, return_hidden: bool = False) -> torch.Tensor:
        """Logits ``[batch, seq, vocab]``; with ``return_hidden``, the backbone's last hidden states (``lm_head``'s)."""
        # The backbone (LlamaModel, GPT2Model...) when only the hidden states are wanted, else the whole model.
        run: Any = self.model.base_model if return_hidden else self.model
        if isinstance(input_ids, PackedInputs):
            mask = hf_packing.document_mask(self.attn_implementation, input_ids.document_ids,
                                            next(self.model.parameters()).dtype, input_ids.parent_ids)
            out = run(input_ids=input_ids.input_ids, position_ids=input_ids.position_ids, attention_mask=mask,
                      use_cache=False)
        else:
            out = run(input_ids=input_ids, use_cache=False)
        return out.last_hidden_state if return_hidden else out.logits


class SequenceClassifier(_Transformers):
    """Any ``transformers`` sequence classifier (``AutoModelForSequenceClassification``, BERT-style): ``forward(batch)``
    takes the data's ``{"input_ids", "attention_mask"}`` and returns logits ``[batch, num_labels]``."""

    adapter_task = "SEQ_CLS"
    adapter_heads = ("classifier", "score")  # trained in full beside an adapter (peft's SEQ_CLS modules_to_save)
    task = "sequence_classification"

    def __init__(self, config: str | None = "bert", path: str | None = None,
                 overrides: Mapping[str, Any] | None = None, num_labels: int = 2,
                 attn_implementation: str = "sdpa") -> None:
        super().__init__("AutoModelForSequenceClassification", config, path, overrides, attn_implementation,
                         num_labels=num_labels)

    @staticmethod
    def packing_refusal(**_: Any) -> str | None:
        """A classifier never trains on packed rows."""
        return ("data.packing=true with a sequence classifier (model=hf_classifier): packing lays several examples "
                "of a causal language model end to end in one row, but a classifier predicts one label per row. "
                "Drop data.packing; a classifier's batches are padded per the shape policy (dynamic=bucket pads "
                "least).")

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
