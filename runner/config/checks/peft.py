"""Checks of ``peft`` (LoRA, QLoRA): what cannot be adapted or loaded is refused before anything is written, each
with the key and the fix. The model is built on the meta device (shapes, no memory; a saved model, ``model.path``,
from its ``config.json``) and asked the same rule the injection follows (``runner.config.rules.peft``).
``runner.config.checks.validate`` runs them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.config import target_objects
from runner.config.rules.peft import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    NF4_BLOCK,
    AdapterPlan,
    PeftTargetError,
    adapter_root,
    lora_key,
    oriented,
    resolve_plan,
    saved_key,
)
from runner.config.schema import RunConfig
from runner.config.schema.peft import PeftMethod


def _on(cfg: RunConfig) -> bool:
    return cfg.peft.method is not PeftMethod.none


def check_peft_numbers(cfg: RunConfig) -> str | None:
    """The adapter's rank, scale and dropout."""
    p, key = cfg.peft, f"peft={cfg.peft.method.value}"
    if not _on(cfg):
        return None
    if p.r <= 0:
        return (f"peft.r={p.r} with {key}: the adapter's rank is the inner size of lora_A [r, in] and lora_B [out, r] "
                "and must be a positive integer. Give peft.r=16 (the default; 8 to 64 are usual).")
    if p.alpha <= 0:
        return (f"peft.alpha={p.alpha} with {key}: the adapter's output is scaled by alpha / r, so an alpha <= 0 "
                "leaves the model unchanged or reverses the adapter. Give peft.alpha=32 (the default, twice peft.r).")
    if not 0 <= p.dropout < 1:
        return (f"peft.dropout={p.dropout} with {key}: the probability of zeroing an adapter input must be in "
                "[0, 1). Give peft.dropout=0.0 (the default) or e.g. 0.05.")
    return None


def _plan(cfg: RunConfig) -> tuple[Any, AdapterPlan] | str | None:
    """The meta-device model and its adapter plan; the refusal (a string); None when the model does not build on
    the meta device (its own checks say why)."""
    import lightning as L

    model = target_objects.meta_model(cfg.model)
    if model is None:
        return None
    if isinstance(model, L.LightningModule):
        target = target_objects.fields(cfg.model).get("_target_", "?")
        return (f"peft={cfg.peft.method.value} with model._target_={target}, a LightningModule of your own: its "
                "configure_optimizers builds its own optimizer, which runner cannot restrict to the adapter. Adapt "
                "its model yourself (runner.peft.apply_peft(self.model, runner.PeftConfig(method=...)) in __init__, "
                "and an optimizer over the parameters that require grad), and train it with peft=none; or give "
                "model._target_ an nn.Module.")
    try:
        return model, resolve_plan(model, cfg.peft)
    except PeftTargetError as e:
        return str(e)


def check_peft_targets(cfg: RunConfig) -> str | None:
    """``peft.target_modules`` and ``peft.modules_to_save`` name modules the model has, and LoRA can adapt them
    (the model has a linear layer; under QLoRA each weight fills whole NF4 blocks)."""
    if not _on(cfg):
        return None
    found = _plan(cfg)
    if not isinstance(found, tuple):
        return found
    model, plan = found
    if cfg.peft.method is PeftMethod.qlora:
        _, root = adapter_root(model)
        odd = [n for n in plan.targets if root.get_submodule(n).weight.numel() % NF4_BLOCK]
        if odd:
            shape = list(root.get_submodule(odd[0]).weight.shape)
            return (f"peft=qlora: {odd[0]}'s weight {shape} does not fill whole NF4 blocks of {NF4_BLOCK} values "
                    f"({len(odd)} target(s) like it). Leave it out of peft.target_modules, or use peft=lora.")
    return None


def _saved_shapes(adapter: Path) -> dict[str, tuple[int, ...]]:
    """Key -> shape of a safetensors file, from its header alone."""
    from safetensors import safe_open

    with safe_open(str(adapter), "pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 - safe_open has no iterator


def _expected(model: Any, plan: AdapterPlan, r: int) -> dict[str, tuple[int, ...]]:
    """The shapes of the adapter this run builds, under peft's keys."""
    _, root = adapter_root(model)
    shapes: dict[str, tuple[int, ...]] = {}
    for name in plan.targets:
        out, inp = oriented(root.get_submodule(name))
        shapes[lora_key(name, "A")], shapes[lora_key(name, "B")] = (r, inp), (out, r)
    for name in plan.saved:
        for k, v in root.get_submodule(name).state_dict().items():
            shapes[saved_key(name, k)] = tuple(v.shape)
    return shapes


def check_peft_path(cfg: RunConfig) -> str | None:
    """``peft.path`` holds an adapter in peft's format whose weights fit this model's adapter, shape by shape."""
    path = cfg.peft.path
    if not _on(cfg) or not path:
        return None
    d = Path(path).expanduser()
    fix = "Give a directory an earlier LoRA run exported (<run_dir>/model) or peft's save_pretrained wrote."
    if not (d / ADAPTER_CONFIG).is_file() or not (d / ADAPTER_WEIGHTS).is_file():
        has = "does not exist" if not d.exists() else f"has no {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS}"
        return f"peft.path={path} {has}: an adapter in peft's format is a directory holding both. {fix}"
    found = _plan(cfg)
    if not isinstance(found, tuple):
        return None  # check_peft_targets names the problem
    try:
        saved = _saved_shapes(d / ADAPTER_WEIGHTS)
    except Exception as e:
        return f"peft.path={path}: {ADAPTER_WEIGHTS} is not a safetensors file ({type(e).__name__}: {e}). {fix}"
    expected = _expected(*found, cfg.peft.r)
    different = [k for k in expected if k in saved and saved[k] != expected[k]]
    if different:
        return (f"peft.path={path} does not fit this model{_trained_on(d)}: {len(different)} of its weights differ "
                f"in shape from this run's adapter: {_mismatches(different, saved, expected)}. An adapter fits the "
                "model and the peft.r it was trained with: give that model (model.path, or the model options it was "
                "trained with) and peft.r (the adapter's adapter_config.json says r and base_model_name_or_path), "
                "or train a new adapter without peft.path.")
    missing = [k for k in expected if k not in saved]
    unexpected = [k for k in saved if k not in expected]
    if missing or unexpected:
        what = (f"{len(missing)} of this run's adapter weights are not in it (e.g. {missing[0]})" if missing else
                f"{len(unexpected)} of its weights are not in this run's adapter (e.g. {unexpected[0]})")
        return (f"peft.path={path}: {what}. Give the peft.target_modules and peft.modules_to_save it was trained "
                f"with (its {ADAPTER_CONFIG} lists them).")
    return None


def _trained_on(adapter: Path) -> str:
    """`` (trained on BASE)`` from the adapter's ``adapter_config.json``, or nothing when it does not say."""
    import json

    try:
        base = json.loads((adapter / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return ""
    return f" (trained on {base}, its {ADAPTER_CONFIG} says)" if base else ""


def _mismatches(keys: list[str], saved: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]) -> str:
    """Each module whose weights differ, with both shapes (``model.layers.N.self_attn.q_proj (N = 0, 1): lora_A
    [16, 128], lora_B [128, 16] in the adapter; [16, 64], [64, 16] here``); modules alike but for their layer index
    named once."""
    import re

    by_module: dict[str, list[tuple[str, tuple[int, ...], tuple[int, ...]]]] = {}
    for k in keys:
        name = k.removeprefix("base_model.model.")
        module, lora, part = name.rpartition(".lora_")
        module, part = (module, f"lora_{part.split('.')[0]}") if lora else name.rsplit(".", 1)
        by_module.setdefault(module, []).append((part, saved[k], expected[k]))
    groups: dict[tuple[str, tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]], list[str]] = {}
    for module, parts in by_module.items():
        layer = re.search(r"\.(\d+)\.", module)
        folded = re.sub(r"\.\d+\.", ".N.", module, count=1)
        groups.setdefault((folded, tuple(parts)), []).append(layer.group(1) if layer else "")
    items = []
    for (folded_module, shapes), layers in groups.items():
        where = f" (N = {', '.join(layers)})" if any(layers) else ""
        was = ", ".join(f"{part} {list(a)}" for part, a, _ in shapes)
        items.append(f"{folded_module}{where}: {was} in the adapter; {', '.join(str(list(b)) for _, _, b in shapes)} "
                     "here")
    return "; ".join(items)


def _device(cfg: RunConfig) -> str:
    """Where NF4 will run: the CPU, or the (first) device of the run's accelerator."""
    return "cpu" if cfg.trainer.accelerator == "cpu" else cfg.trainer.single_device()


def check_qlora(cfg: RunConfig) -> str | None:
    """QLoRA's NF4 runs here: torchao imports and round-trips a block on the run's device."""
    if cfg.peft.method is not PeftMethod.qlora:
        return None
    from runner import torch_internals as ti

    device = _device(cfg)
    problem = ti.nf4_problem(device)
    if problem is None:
        return None
    return (f"peft=qlora stores the frozen base weights in 4-bit NF4 through torchao, which cannot run here: "
            f"{problem}. Install torchao (pip install 'runner[peft]'), or train the same adapter over full-precision "
            "base weights with peft=lora.")


CHECKS = [check_peft_numbers, check_peft_targets, check_peft_path, check_qlora]
