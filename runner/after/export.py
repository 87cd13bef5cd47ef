"""The trained model, out: a directory its family's own library loads (transformers' ``save_pretrained``, timm's
``save_for_hf``, or ``model.safetensors`` + the config node; a LoRA run's adapter via ``adapter_export``), with
``runner_export.json`` and a README saying how to load it; written beside its place and renamed into it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from enum import Enum
from pathlib import Path
from typing import Any

from torch import nn

from runner.after.adapter_export import write_adapter_export
from runner.after.export_prompt import chat_template_into, readme_lines
from runner.after.family import Family, family_of, label_names, tokens_of, writes_text
from runner.after.source import clean_state, is_clean
from runner.config import ConfigError
from runner.config.schema import RunConfig
from runner.peft import adapter_of, apply_peft
from runner.telemetry.data_report import read_prompt

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
METADATA = "runner_export.json"
# tokenizer_config.json's tokenizer_class where no tokenizer is known: AutoTokenizer, and so pipeline, refuses the
# folder instead of building an empty tokenizer for the model's type.
NO_TOKENIZER = "NoTokenizerExported"
EXPORT_DIR = "model"  # where a run exports its model at the end of the fit: <run_dir>/model


def node_dict(node: Any) -> dict[str, Any]:
    """A config node (a schema dataclass or a plain dict) as JSON-ready values."""
    values = dataclasses.asdict(node) if dataclasses.is_dataclass(node) and not isinstance(node, type) else dict(node)
    return json.loads(json.dumps(values, default=lambda v: v.value if isinstance(v, Enum) else str(v)))


def export_model(model: nn.Module, cfg: RunConfig, run_dir: Path, out: Path, checkpoint: str | None,
                 step: int | None, extra: dict[str, Any] | None = None) -> Path:
    """Write ``model`` (trained as ``cfg`` says) into ``out``; ``extra`` goes into ``runner_export.json``."""
    if not is_clean(model):  # compile or checkpoint wrappers in its keys, or runner's hooks: rebuilt from the config
        from hydra.utils import instantiate

        fresh = instantiate(cfg.model)
        apply_peft(fresh, dataclasses.replace(cfg.peft, path=None))  # the same adapter's layers, given the weights
        fresh.load_state_dict(clean_state(model.state_dict()))
        model = fresh.eval()
    family = family_of(model)
    adapter = adapter_of(model)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        more = dict(extra or {})
        if adapter is not None:
            loading, more["adapter"] = write_adapter_export(model, adapter, cfg, run_dir, tmp, out, family.value,
                                                            _WRITERS[family])
        else:
            loading = _WRITERS[family](model, cfg, run_dir, tmp)
        tokens = tokens_of(cfg)
        node = node_dict(cfg.model)  # as it was applied: a saved model's config and overrides never were
        if node.get("path"):
            node = {k: v for k, v in node.items() if k not in ("config", "overrides")}
        task = "causal_lm" if writes_text(model) else "classification" if getattr(cfg.data, "num_classes", None) \
            else "model"
        meta: dict[str, Any] = {
            "family": family.value, "task": task, "checkpoint": checkpoint, "step": step,
            "run_dir": str(run_dir), "model": node, "tokenizer": tokens.note if tokens else None,
            "load": loading, **more}
        if task == "classification":
            meta["labels"] = label_names(run_dir, int(getattr(cfg.data, "num_classes", 0)))
        if tokens and not tokens.directory and (tmp / "tokenizer.json").is_file():
            meta["tokenizer"] += "; tokenizer.json beside the model gives exactly these ids"
        prompt = read_prompt(run_dir)  # an instruction run's format: the export asks as the run did
        template = None
        if prompt is not None:
            meta["prompt"] = prompt
            if tokens is not None and (tmp / "tokenizer_config.json").is_file():
                template = chat_template_into(tmp, prompt)
        (tmp / METADATA).write_text(json.dumps(meta, indent=2) + "\n")
        (tmp / "README.md").write_text(_readme(family, meta, loading, template))
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)  # once the new directory is in place
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out



def _write_hf(model: nn.Module, cfg: RunConfig, run_dir: Path, out: Path) -> str:
    hf: Any = model.model
    auto = "AutoModelForCausalLM"
    if family_of(model) is Family.hf_classifier:
        auto = "AutoModelForSequenceClassification"
        names = label_names(run_dir, int(hf.config.num_labels))
        hf.config.id2label = dict(enumerate(names))
        hf.config.label2id = {name: i for i, name in enumerate(names)}
    hf.save_pretrained(out)
    tokens = tokens_of(cfg)
    if tokens is None:  # ids of a user's own data: no tokenizer to export, and transformers must not guess one
        (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": NO_TOKENIZER}) + "\n")
        return (f"transformers.{auto}.from_pretrained(DIR); no tokenizer was exported (the run's data module made "
                "its own ids): give pipeline(..., tokenizer=...) the one that makes them")
    tokens.save(out)
    return f"transformers.{auto}.from_pretrained(DIR); transformers.AutoTokenizer.from_pretrained(DIR)"


def _write_timm(model: nn.Module, cfg: RunConfig, run_dir: Path, out: Path) -> str:
    from timm.models import save_for_hf

    net: Any = model.model
    node = node_dict(cfg.model)
    args = {k: v for k, v in (node.get("overrides") or {}).items() if v is not None}
    if node.get("img_size") is not None:
        args["img_size"] = node["img_size"]
    # timm's own folder: model.safetensors and config.json (architecture, num_classes, pretrained_cfg, model_args)
    save_for_hf(net, str(out), model_config={"label_names": label_names(run_dir, int(net.num_classes))},
                model_args=args or None, safe_serialization=True)
    return ("timm.create_model('local-dir:DIR', pretrained=True), or timm.create_model(config.json's architecture, "
            "num_classes=..., **model_args) and load_state_dict(safetensors.torch.load_file(DIR/model.safetensors))")


def _write_state(model: nn.Module, cfg: RunConfig, run_dir: Path, out: Path) -> str:
    from safetensors.torch import save_model

    save_model(model, str(out / WEIGHTS))  # tied weights (the GPT's head and embedding) kept once
    # runner's config node, not a transformers config (no model_type): transformers.pipeline refuses the folder.
    (out / CONFIG).write_text(json.dumps(node_dict(cfg.model), indent=2) + "\n")
    tokens = tokens_of(cfg)
    saved = tokens is not None and tokens.save(out)
    return ("hydra.utils.instantiate(json.load(open(DIR/config.json))) (or the class of its _target_ with its other "
            "keys), then safetensors.torch.load_model(model, DIR/model.safetensors)" +
            ("; its token ids: transformers.AutoTokenizer.from_pretrained(DIR)" if saved else ""))


_WRITERS = {Family.hf_causal_lm: _write_hf, Family.hf_classifier: _write_hf, Family.timm: _write_timm,
            Family.state_dict: _write_state}


def _readme(family: Family, meta: dict[str, Any], loading: str, template: str | None) -> str:
    lines = [f"# {meta['model'].get('_target_', 'model')}, exported by runner", "",
             f"Trained in {meta['run_dir']}; weights of {meta['checkpoint'] or 'the end of the fit'}"
             f" (step {meta['step']}).", "", f"Family: {family.value}. Load it with: {loading}.", ""]
    if meta.get("tokenizer"):
        lines += [f"Text: {meta['tokenizer']}.", ""]
    if meta.get("labels"):
        lines += [f"Classes by id: {', '.join(meta['labels'])}.", ""]
    if meta.get("prompt"):
        lines += readme_lines(meta["prompt"], template)
    lines += [f"Everything runner knows about it: {METADATA}.", ""]
    return "\n".join(lines)


def export_error(out: Path, force: bool) -> None:
    """Raise ``ConfigError`` when the export may not go to ``out`` (checked before anything is loaded)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file: give a directory to export the model into (it is created).")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"{out} exists and is not empty: an export writes a whole directory and would replace what "
                          "is there. Give --force to replace it, or another directory with --out DIR.")
