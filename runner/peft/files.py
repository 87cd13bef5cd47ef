"""The adapter on disk, in peft's format: ``adapter_config.json`` and ``adapter_model.safetensors``, loadable with
``peft.PeftModel.from_pretrained(base, DIR)`` (and read back by ``peft.path``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from runner.config.decisions.peft import ADAPTER_CONFIG, ADAPTER_WEIGHTS, PeftTargetError, lora_key, saved_key
from runner.config.schema.peft import PeftMethod
from runner.peft.adapter import Adapter


def adapter_state(adapter: Adapter) -> dict[str, torch.Tensor]:
    """The adapter's tensors under peft's key names."""
    state: dict[str, torch.Tensor] = {}
    for name, layer in adapter.layers().items():
        state[lora_key(name, "A")] = layer.lora_A.weight.detach()
        state[lora_key(name, "B")] = layer.lora_B.weight.detach()
    for name in adapter.plan.saved:
        for key, value in adapter.root.get_submodule(name).state_dict().items():
            state[saved_key(name, key)] = value.detach()
    return {k: v.cpu().contiguous() for k, v in state.items()}


def adapter_config(adapter: Adapter, base: str | None, revision: str | None = None) -> dict[str, Any]:
    """peft's ``LoraConfig`` of the adapter, as ``adapter_config.json`` holds it (``base`` at ``revision``)."""
    c = adapter.config
    layers = adapter.layers().values()
    alpha = int(c.alpha) if float(c.alpha).is_integer() else c.alpha
    return {
        "peft_type": "LORA", "task_type": getattr(type(adapter.model), "adapter_task", None),
        "base_model_name_or_path": base, "r": c.r, "lora_alpha": alpha, "lora_dropout": c.dropout,
        "target_modules": sorted(adapter.plan.targets), "modules_to_save": list(adapter.plan.saved) or None,
        "fan_in_fan_out": any(layer.fan_in_fan_out for layer in layers), "bias": "none", "use_rslora": False,
        "use_dora": False, "init_lora_weights": True, "inference_mode": True, "revision": revision,
    }


def write_adapter(adapter: Adapter, out: Path, base: str | None, revision: str | None = None) -> None:
    """``adapter_config.json`` and ``adapter_model.safetensors`` into ``out`` (``base`` at ``revision``)."""
    from safetensors.torch import save_file

    save_file(adapter_state(adapter), str(out / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    (out / ADAPTER_CONFIG).write_text(json.dumps(adapter_config(adapter, base, revision), indent=2) + "\n")


def load_adapter(adapter: Adapter, path: str) -> None:
    """Copy the adapter saved in ``path`` into ``adapter``'s layers (``PeftTargetError`` for other keys)."""
    from safetensors.torch import load_file

    saved = load_file(str(Path(path).expanduser() / ADAPTER_WEIGHTS))
    expected = adapter_state(adapter)
    missing = [k for k in expected if k not in saved]
    unexpected = [k for k in saved if k not in expected]
    if missing or unexpected:
        what = (f"{len(missing)} of this run's adapter weights are not in it (e.g. {missing[0]})" if missing else
                f"{len(unexpected)} of its weights are not in this run's adapter (e.g. {unexpected[0]})")
        raise PeftTargetError(f"peft.path={path}: {what}. Give the peft.target_modules and peft.modules_to_save the "
                              "adapter was trained with (its adapter_config.json lists them).")
    params = dict(adapter.root.named_parameters()) | dict(adapter.root.named_buffers())
    with torch.no_grad():
        for key, value in saved.items():
            name = key.removeprefix("base_model.model.")  # peft's key -> the root's parameter (x.lora_A.weight)
            params[name].copy_(value.to(params[name].dtype))


def base_layer(layer: nn.Module) -> nn.Module:
    """An adapted layer's base alone: a layer of its base's kind holding its (dequantized for QLoRA) base weight."""
    own = getattr(layer, "weight", None)  # LoRA keeps the base's parameter; QLoRA has none (NF4 buffers)
    module: nn.Module
    with torch.device("meta"):  # shapes only: the weights are set below
        if layer.fan_in_fan_out:
            from transformers.pytorch_utils import Conv1D

            module = Conv1D(layer.out_features, layer.in_features)  # type: ignore[arg-type]
        else:
            module = nn.Linear(layer.in_features, layer.out_features, bias=False)  # type: ignore[arg-type]
    if not isinstance(own, nn.Parameter):
        weight = layer.base_weight()  # type: ignore[operator]
        own = nn.Parameter(weight.t().contiguous() if layer.fan_in_fan_out else weight, requires_grad=False)
    module.weight = own
    module.bias = layer.bias  # type: ignore[assignment]
    return module


@contextmanager
def base_view(adapter: Adapter) -> Iterator[nn.Module]:
    """The adapted model as its base (each adapted layer swapped for ``base_layer``), put back on exit."""
    layers = adapter.layers()
    try:
        for name, layer in layers.items():
            adapter.root.set_submodule(name, base_layer(layer))
        yield adapter.model
    finally:
        for name, layer in layers.items():
            adapter.root.set_submodule(name, layer)


def dequantized(adapter: Adapter) -> bool:
    """Whether the base weights the adapter was trained on are NF4 (so a written base is dequantized)."""
    return adapter.config.method is PeftMethod.qlora
