"""Checks of a ``transformers`` model's arguments, before anything is written: each returns one paragraph (what is
wrong, what exists, the fix) or None."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# Files a saved model directory holds, by what they are (transformers' own names).
WEIGHT_FILES = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")
_INSTALL = "pip install 'runner[hf]' (make setup installs it)"


def _close(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to three candidates close to ``name`` (case-insensitive), closest first."""
    by_lower = {c.lower(): c for c in candidates}
    return [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)]


def task_types(task: str) -> dict[str, str]:
    """Model type -> model class name of every family transformers has for ``task`` (``causal_lm``...)."""
    from transformers.models.auto import modeling_auto

    mapping = getattr(modeling_auto, f"MODEL_FOR_{task.upper()}_MAPPING_NAMES")
    return {k: v if isinstance(v, str) else v[0] for k, v in mapping.items()}


def config_class(name: str) -> type:
    """The configuration class of a model type (``llama``) or a configuration class name (``LlamaConfig``)."""
    from transformers import CONFIG_MAPPING

    kind = model_type(name)
    if kind is None:
        raise KeyError(name)
    return CONFIG_MAPPING[kind]


def model_type(name: str) -> str | None:
    """The model type ``name`` names (itself, or the type of the configuration class it names)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if name in CONFIG_MAPPING_NAMES:
        return name
    return next((t for t, cls in CONFIG_MAPPING_NAMES.items() if cls == name), None)


def settings(cls: type) -> set[str]:
    """The settings a configuration class takes: its fields (transformers 5's configurations are dataclasses) or its
    constructor's parameters, and the generic names it maps (GPT-2's ``hidden_size`` is its ``n_embd``)."""
    if dataclasses.is_dataclass(cls):
        names = {f.name for f in dataclasses.fields(cls)}
    else:
        names = {n for n, p in inspect.signature(cls).parameters.items()
                 if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return names | set(getattr(cls, "attribute_map", {}) or {})


def check_config(task: str, config: str, overrides: Mapping[str, Any]) -> str | None:
    """The model type exists for ``task`` and every override is one of its settings."""
    import transformers
    from transformers import CONFIG_MAPPING

    types = task_types(task)
    kind = model_type(config)
    what = "causal LM" if task == "causal_lm" else "sequence classifier"
    if kind not in types:
        matches = _close(config, [*types, *(CONFIG_MAPPING[t].__name__ for t in types if t in CONFIG_MAPPING)])
        hint = f"did you mean {' or '.join(f'model.config={m}' for m in matches)}? " if matches else ""
        known = f" ({kind} has no {what} in transformers)" if kind else ""
        return (f"model.config={config} is not a model type transformers {transformers.__version__} builds as a "
                f"{what}{known}: {hint}model.config takes a model type or its configuration class name. "
                f"Available ({len(types)}): {', '.join(sorted(types))}.")
    cls = config_class(config)
    known_settings = settings(cls)
    for key in overrides:
        if key not in known_settings:
            matches = _close(key, known_settings)
            hint = f"Did you mean model.overrides.{matches[0]}? " if matches else ""
            return (f"model.overrides.{key} is not a setting of {cls.__name__} (model.config={config}), which would "
                    f"keep it as a stray attribute that nothing reads. {hint}Its settings include "
                    f"{', '.join(sorted(known_settings - _GENERIC)[:40])}. Drop it (~model.overrides.{key}), or set "
                    "it to null to keep the family's default.")
    return None


# Settings every configuration has (output flags, label maps): left out of the listing, not refused.
_GENERIC = {"transformers_version", "architectures", "output_hidden_states", "return_dict", "dtype",
            "chunk_size_feed_forward", "is_encoder_decoder", "id2label", "label2id", "problem_type"}


def check_path(task: str, path: str) -> str | None:
    """``path`` is a directory with a configuration, weights and a tokenizer of a model for ``task``."""
    root = Path(path).expanduser()
    if not root.exists():  # a Hub name was resolved to its snapshot folder before (runner.hub)
        return (f"model.path={path} does not exist. Give the directory a model was saved to (save_pretrained: "
                "config.json, the weights and the tokenizer's files), or build one from its configuration with "
                "model.config=NAME (random weights).")
    if not root.is_dir():
        return f"model.path={path} is a file; give the directory that holds it (config.json, weights, tokenizer)."
    missing = []
    if not (root / "config.json").is_file():
        missing.append("its configuration (config.json)")
    if not any((root / f).is_file() for f in WEIGHT_FILES):
        missing.append(f"weights (one of {', '.join(WEIGHT_FILES)})")
    if not any((root / f).is_file() for f in TOKENIZER_FILES):
        missing.append(f"a tokenizer (one of {', '.join(TOKENIZER_FILES)}, with tokenizer_config.json)")
    if missing:
        return (f"model.path={path} lacks {'; '.join(missing)}. A model directory is what save_pretrained writes "
                "for the model and for its tokenizer (model.save_pretrained(DIR); tokenizer.save_pretrained(DIR)). "
                "Complete it, or build the model from its configuration with model.config=NAME (random weights).")
    try:
        kind = json.loads((root / "config.json").read_text()).get("model_type")
    except (OSError, ValueError) as e:
        return f"model.path={path}: config.json is not readable JSON ({e}). Re-save the model (save_pretrained)."
    if kind and kind not in task_types(task):
        what = "causal LM" if task == "causal_lm" else "sequence classifier"
        return (f"model.path={path} holds a {kind} model, which transformers has no {what} for. Use a {what} "
                f"checkpoint, or the model group that fits it.")
    return None


def check_model(task: str, config: str | None, path: str | None, overrides: Mapping[str, Any]) -> str | None:
    """The whole check for a model built by ``config`` or loaded from ``path``."""
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        return (f"model.config/model.path: Hugging Face models need transformers, which does not import ({e}): "
                f"{_INSTALL}.")
    if path:
        return check_path(task, path)
    if not config:
        return ("model.config and model.path are both empty: give model.config=NAME (a model type such as llama, "
                "gpt2 or bert, built with random weights) or model.path=DIR (a saved model directory).")
    return check_config(task, config, overrides)
