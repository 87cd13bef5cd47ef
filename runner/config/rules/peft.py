"""Which modules an adapter adapts and which it trains in full: one rule for the config check (run on the model
built on the meta device, before anything is written) and for ``runner.peft``'s injection (on the real model).

- The names are relative to the module peft's key names refer to (``adapter_root``): a transformers model inside
  runner's wrapper (``CausalLM.model``), else the model itself.
- ``peft.target_modules``: each name matches a module whose path is that name or ends with ``.`` and it (peft's
  rule for a list). Empty: peft's ``all-linear``, every ``nn.Linear`` (and transformers' ``Conv1D``, GPT-2's
  linear) except the output layers: the model's output embeddings (``get_output_embeddings()``, or a linear
  whose weight is an embedding's), and its classifier head.
- ``peft.modules_to_save``: the same matching; None is the model's declared head (``adapter_heads``: a
  transformers classifier's ``classifier`` or ``score``), trained in full.

Each problem is one paragraph naming the key, what the model has and the fix (``runner.config.checks.peft``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from runner.config.schema.peft import PeftConfig, PeftMethod

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PREFIX = "base_model.model."
"""What peft's saved keys start with (its PeftModel's ``base_model``, a tuner whose ``model`` is the base)."""


NF4_BLOCK = 64
"""Values per NF4 block (torchao's default and QLoRA's): a QLoRA target's weight holds a multiple of it."""
NF4_SCALER_BLOCK = 256
"""Block scales per int8 group (torchao's default), or the largest divisor of the block count below it."""


def nf4_scaler_block(numel: int) -> int:
    """The scale group size for a weight of ``numel`` values: 256, or the largest divisor of its block count
    under 256 (a weight such as 344 x 128, whose 688 blocks 256 does not divide)."""
    blocks = numel // NF4_BLOCK
    return next(s for s in range(min(NF4_SCALER_BLOCK, blocks), 0, -1) if blocks % s == 0)


def lora_key(module: str, part: str) -> str:
    """peft's key of an adapted linear's ``lora_A`` or ``lora_B`` weight (``part``: ``A`` or ``B``)."""
    return f"{_PREFIX}{module}.lora_{part}.weight"


def saved_key(module: str, param: str) -> str:
    """peft's key of a parameter of a module trained in full (``modules_to_save``)."""
    return f"{_PREFIX}{module}.{param}"


@dataclass(frozen=True)
class AdapterPlan:
    """What an adapter does to one model: the target linears and the modules trained in full, by name under
    ``root`` (the module ``root_name`` names, '' for the model itself)."""

    root_name: str
    targets: tuple[str, ...]
    saved: tuple[str, ...]


class PeftTargetError(ValueError):
    """A ``peft`` setting that names no module of the model, or one LoRA cannot adapt (one paragraph)."""


def adapter_root(model: Any) -> tuple[str, Any]:
    """The module peft's names are relative to, and its name in ``model`` (a class declares ``adapter_root``)."""
    name = str(getattr(type(model), "adapter_root", "") or "")
    return name, (model.get_submodule(name) if name else model)


def linear_kinds() -> tuple[type, ...]:
    """The module classes LoRA adapts: ``nn.Linear``, and transformers' ``Conv1D`` where transformers imports."""
    from torch import nn

    try:
        from transformers.pytorch_utils import Conv1D
    except Exception:  # transformers not installed, or broken: only nn.Linear then
        return (nn.Linear,)
    return (nn.Linear, Conv1D)


def matches(name: str, pattern: str) -> bool:
    """peft's rule for a list of names: the path itself, or its end after a dot."""
    return name == pattern or name.endswith("." + pattern)


def _output_layers(root: Any, kinds: tuple[type, ...]) -> set[str]:
    """The names of ``root``'s output layers: its output embeddings and linears tied to an embedding."""
    from torch import nn

    names: dict[str, Any] = dict(root.named_modules())
    out: set[str] = set()
    get_output = getattr(root, "get_output_embeddings", None)
    head = get_output() if callable(get_output) else None
    embeddings = [m.weight for m in names.values() if isinstance(m, nn.Embedding)]
    for name, module in names.items():
        tied = isinstance(module, kinds) and any(getattr(module, "weight", None) is w for w in embeddings)
        if module is head or tied:
            out.add(name)
    return out


def shown(names: list[str], limit: int = 12) -> str:
    """Module names for a message: layer indices folded (``layers.N.``), each with its count."""
    counts: dict[str, int] = {}
    for name in names:
        folded = re.sub(r"\.\d+\.", ".N.", name)
        counts[folded] = counts.get(folded, 0) + 1
    items = [f"{k} (x{v})" if v > 1 else k for k, v in counts.items()]
    more = f", and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def _model_name(model: Any) -> str:
    return type(model).__name__


def resolve_plan(model: Any, peft: PeftConfig) -> AdapterPlan:
    """The targets and trained-in-full modules of ``model`` under ``peft``; ``PeftTargetError`` when a setting
    names nothing or the model has nothing LoRA can adapt."""
    root_name, root = adapter_root(model)
    kinds = linear_kinds()
    modules = {n: m for n, m in root.named_modules() if n}
    linears = [n for n, m in modules.items() if isinstance(m, kinds)]
    key = f"peft={peft.method.value}"
    if not linears:
        raise PeftTargetError(
            f"{key} on {_model_name(model)}, which has no nn.Linear (its modules: {shown(list(modules)) or 'none'}): "
            "LoRA adds its adapter beside linear layers, and there is none to adapt. Train this model in full "
            "(peft=none), or select a model with linear layers.")
    heads = [str(h) for h in getattr(type(model), "adapter_heads", ())]
    saved = _outermost(_matched(modules, peft.modules_to_save, "peft.modules_to_save", model)
                       if peft.modules_to_save is not None else [n for n in modules if n in heads])
    if peft.target_modules:
        found = _matched(modules, peft.target_modules, "peft.target_modules", model)
        other = [n for n in found if n not in linears]
        if other:
            m = modules[other[0]]
            raise PeftTargetError(
                f"peft.target_modules={peft.target_modules} matches {other[0]} ({type(m).__name__}), which is not a "
                "linear layer: LoRA adapts nn.Linear (and transformers' Conv1D) only. Name linear layers (this "
                f"model's: {shown(linears)}), and put a module to train in full in peft.modules_to_save.")
        targets = found
    else:
        skip = _output_layers(root, kinds) | set(saved)
        targets = [n for n in linears if n not in skip] or linears
    inside_saved = [t for t in targets if any(t == s or t.startswith(s + ".") for s in saved)]
    if inside_saved:
        raise PeftTargetError(
            f"peft.target_modules adapts {inside_saved[0]}, which peft.modules_to_save trains in full: a module is "
            "either adapted or trained in full. Drop it from one of the two.")
    return AdapterPlan(root_name, tuple(targets), tuple(saved))


def _outermost(names: list[str]) -> list[str]:
    """``names`` without those inside another of them (``classifier.dense`` inside ``classifier``)."""
    return [n for n in names if not any(n.startswith(o + ".") for o in names)]


def _matched(modules: dict[str, Any], patterns: list[str], key: str, model: Any) -> list[str]:
    """The module names ``patterns`` match; ``PeftTargetError`` naming a pattern that matches none."""
    from torch import nn

    for pattern in patterns:
        if not any(matches(n, pattern) for n in modules):
            kinds = linear_kinds()
            linears = [n for n, m in modules.items() if isinstance(m, kinds)]
            named = [n for n, m in modules.items() if not isinstance(m, (nn.ModuleList, nn.ModuleDict))]
            listing = (f"Its linear layers: {shown(linears)}" if key.endswith("target_modules")
                       else f"Its modules: {shown(named)}")
            empty = ("leave peft.target_modules empty for every linear of attention and MLP" if
                     key.endswith("target_modules") else "peft.modules_to_save=[] for none")
            raise PeftTargetError(
                f"{key}: {pattern!r} matches no module of {_model_name(model)}: a name matches a module's path or "
                f"its end after a dot (q_proj matches model.layers.0.self_attn.q_proj). {listing}. Give some of "
                f"these, or {empty}.")
    return [n for n in modules if any(matches(n, p) for p in patterns)]


def oriented(module: Any) -> tuple[int, int]:
    """``(out_features, in_features)`` of a linear (``nn.Linear``: weight [out, in]; ``Conv1D``: [in, out])."""
    from torch import nn

    out, inp = module.weight.shape
    return (int(out), int(inp)) if isinstance(module, nn.Linear) else (int(inp), int(out))


def adapted_shapes(model: Any, plan: AdapterPlan, peft: PeftConfig, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """The state-dict shapes ``model`` has once adapted (``runner.peft``'s layers: each target keeps ``weight`` and
    ``bias`` and gains ``lora_A.weight`` and ``lora_B.weight``; under QLoRA its ``weight`` becomes the NF4 buffers),
    keys under ``prefix``; computed from the unadapted model (the config checks' model on the meta device)."""
    root_name, root = adapter_root(model)
    head = f"{prefix}{root_name}." if root_name else prefix
    shapes = {f"{prefix}{k}": tuple(v.shape) for k, v in model.state_dict().items()}
    for name in plan.targets:
        module = root.get_submodule(name)
        out, inp = oriented(module)
        shapes[f"{head}{name}.lora_A.weight"] = (peft.r, inp)
        shapes[f"{head}{name}.lora_B.weight"] = (out, peft.r)
        if peft.method is PeftMethod.qlora:
            numel = out * inp
            del shapes[f"{head}{name}.weight"]
            shapes.update({f"{head}{name}.weight_codes": (numel // 2,),
                           f"{head}{name}.weight_scalers": (numel // NF4_BLOCK,),
                           f"{head}{name}.weight_factor": (numel // NF4_BLOCK // nf4_scaler_block(numel),),
                           f"{head}{name}.weight_mean": (), f"{head}{name}.weight_lut": (16,)})
    return shapes


def state_shapes(model: Any, peft: PeftConfig, prefix: str = "") -> dict[str, tuple[int, ...]] | None:
    """The state-dict shapes of ``model`` as the run trains it (adapted unless ``peft.method=none``), keys under
    ``prefix``; None when the adapter cannot be planned (``runner.config.checks.peft`` says why)."""
    if peft.method is PeftMethod.none:
        return {f"{prefix}{k}": tuple(v.shape) for k, v in model.state_dict().items()}
    try:
        return adapted_shapes(model, resolve_plan(model, peft), peft, prefix)
    except PeftTargetError:
        return None
