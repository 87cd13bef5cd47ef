"""A LoRA or QLoRA run's export: the adapter in peft's format beside the base it applies to (the saved model the run
started from, a Hub base by name and commit, or one written to ``base/``), or with ``--merge`` folded into it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from runner.config import ConfigError
from runner.config.composing.hub_names import pins_of
from runner.config.schema import RunConfig
from runner.config.schema.peft import PeftConfig, PeftMethod
from runner.peft import Adapter, apply_peft
from runner.peft.files import base_view, dequantized, write_adapter

BASE_DIR = "base"  # where an adapter export writes a base that exists nowhere else
Writer = Callable[[nn.Module, RunConfig, Path, Path], str]

_LOADERS = {
    "hf_causal_lm": "transformers.AutoModelForCausalLM.from_pretrained(BASE)",
    "hf_classifier": "transformers.AutoModelForSequenceClassification.from_pretrained(BASE)",
    "timm": "timm.create_model('local-dir:BASE', pretrained=True)",
    "state_dict": "the module of BASE/config.json with safetensors.torch.load_model(module, BASE/model.safetensors)",
}


def write_adapter_export(model: nn.Module, adapter: Adapter, cfg: RunConfig, run_dir: Path, tmp: Path, final: Path,
                         family: str, base_writer: Writer) -> tuple[str, dict[str, Any]]:
    """Write the adapter (and its base where needed) into ``tmp``, renamed to ``final`` by the caller; how to load it,
    and what ``runner_export.json`` says about it."""
    saved = getattr(cfg.model, "path", None)
    hub = next((p.record() for p in pins_of(cfg) if p.wanted.key == "model.path"), None)  # a Hub base's run/hub
    if saved:
        base = str(Path(saved).expanduser().resolve())
    else:
        (tmp / BASE_DIR).mkdir()
        with base_view(adapter) as plain:
            base_writer(plain, cfg, run_dir, tmp / BASE_DIR)
        base = str(final.resolve() / BASE_DIR)
    write_adapter(adapter, tmp, hub["name"] if hub else base, hub["commit"] if hub else None)
    tokens = getattr(cfg.data, "tokenizer", None) or saved
    if tokens and (Path(tokens).expanduser() / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(Path(tokens).expanduser()), local_files_only=True).save_pretrained(tmp)
    meta: dict[str, Any] = {"method": adapter.config.method.value, "r": adapter.config.r, "alpha": adapter.config.alpha,
                            "targets": list(adapter.plan.targets), "modules_to_save": list(adapter.plan.saved),
                            "base": base, "base_written": not saved,
                            "base_dequantized_nf4": dequantized(adapter) and not saved}
    if hub:  # the folder above is the Hub snapshot in this machine's cache; the name and commit load it anywhere
        meta["base_hub"] = {"name": hub["name"], "commit": hub["commit"]}
    where = (f"BASE = {hub['name']} at revision={hub['commit']} on the Hub (this machine's copy: {base})" if hub else
             f"BASE = {base}")
    loading = (f"peft.PeftModel.from_pretrained({_LOADERS[family]}, DIR) with {where}; "
               "python -m runner export RUN_DIR --merge writes one model its library loads alone")
    return loading, meta


def merge_error(cfg: RunConfig, run_dir: Path, merge: bool, dequantize: bool) -> str | None:
    """Why ``export --merge`` (``--dequantize``) may not write this run (one paragraph), or None."""
    method = cfg.peft.method
    if dequantize and not merge:
        return "--dequantize goes with --merge (it allows merging a QLoRA adapter into dequantized weights)."
    if not merge:
        return None
    if method is PeftMethod.none:
        return (f"--merge: {run_dir} trained every weight (peft=none), so there is no adapter to merge: its export is "
                "the whole model already. Drop --merge.")
    if method is PeftMethod.qlora and not dequantize:
        return (f"--merge of a QLoRA run ({run_dir}): its base weights were stored in 4-bit NF4, so the merged model "
                "holds them dequantized to float32 (NF4's rounding kept, not the original weights, at 8x the bytes "
                "of the codes). Give --merge --dequantize to write that model, or export the adapter (no --merge) "
                "and apply it with peft to the original base model.")
    return None


def load_causal_lm(folder: Path, family: str | None) -> nn.Module:
    """The causal LM saved in ``folder`` as its family saves it (transformers', or the config node and weights)."""
    if family == "hf_causal_lm":
        from runner.models.hf import CausalLM

        return CausalLM(config=None, path=str(folder))  # from_pretrained, local files only
    from hydra.utils import instantiate
    from safetensors.torch import load_model

    model = instantiate(json.loads((folder / "config.json").read_text()))
    load_model(model, str(folder / "model.safetensors"))
    return model  # type: ignore[no-any-return]


def open_adapter_export(directory: Path, meta: dict[str, Any]) -> nn.Module:
    """A causal LM exported as an adapter: its base loaded, the adapter applied with runner's own layer."""
    adapter = meta["adapter"]
    base = Path(adapter["base"])
    if not base.is_dir() and adapter.get("base_hub"):  # a base read from the Hub: fetched again by name and commit
        from runner import hub

        given = f"{adapter['base_hub']['name']}@{adapter['base_hub']['commit']}"
        wanted = hub.wanted("model.path", given, "model")
        assert wanted is not None, f"{given} is a Hub name"
        try:
            base = Path(hub.fetch(wanted).local)
        except hub.HubError as e:
            raise ConfigError(f"{directory} is an adapter over {given} on the Hugging Face Hub, which could not be "
                              f"read: {e}") from e
    if not base.is_dir():
        raise ConfigError(f"{directory} is an adapter whose base model {base} is gone: an adapter applies to the "
                          "base it was trained over. Put the base back there, or export the run again (python -m "
                          "runner export RUN_DIR --force) or merged (--merge).")
    model = load_causal_lm(base, meta.get("family"))
    apply_peft(model, PeftConfig(method=PeftMethod.lora, r=adapter["r"], alpha=adapter["alpha"],
                                 target_modules=adapter["targets"], modules_to_save=adapter["modules_to_save"],
                                 path=str(directory)))
    return model.eval()
