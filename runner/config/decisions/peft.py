"""Which modules an adapter adapts and which it trains in full (:func:`resolve_plan`), for the checks of ``peft`` (on
the meta-device model) and ``runner.peft``'s injection (on the real one); names are relative to ``adapter_root``."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.config import target_objects
from runner.config.schema import RunConfig
from runner.config.schema.peft import PeftConfig, PeftMethod

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PREFIX = "base_model.model."  # peft's PeftModel.base_model, a tuner whose .model is the base


NF4_BLOCK = 64  # values per NF4 block (torchao's and QLoRA's default): a QLoRA target's weight holds whole blocks
NF4_SCALER_BLOCK = 256  # block scales per int8 group (torchao's default)


def nf4_scaler_block(numel: int) -> int:
    """The scale group size for ``numel`` values: 256, or the largest divisor of the block count below it."""
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
    """The target linears and the modules trained in full, by name under the module ``root_name`` names."""

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
    counts = Counter(re.sub(r"\.\d+\.", ".N.", name) for name in names)
    items = [f"{k} (x{v})" if v > 1 else k for k, v in counts.items()]
    more = f", and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def resolve_plan(model: Any, peft: PeftConfig) -> AdapterPlan:
    """The targets and trained-in-full modules of ``model`` under ``peft``: ``target_modules`` empty is peft's
    ``all-linear`` without the output layers and the head; ``modules_to_save=None`` is the declared head.
    ``PeftTargetError`` when a setting names nothing or nothing can be adapted."""
    root_name, root = adapter_root(model)
    kinds = linear_kinds()
    modules = {n: m for n, m in root.named_modules() if n}
    linears = [n for n, m in modules.items() if isinstance(m, kinds)]
    key = f"peft={peft.method.value}"
    if not linears:
        raise PeftTargetError(
            f"{key} on {type(model).__name__}, which has no nn.Linear (its modules: {shown(list(modules)) or 'none'}): "
            "LoRA adds its adapter beside linear layers, and there is none to adapt. Train this model in full "
            "(peft=none), or select a model with linear layers.")
    heads = [str(h) for h in getattr(type(model), "adapter_heads", ())]
    saved = (_matched(modules, peft.modules_to_save, "peft.modules_to_save", model)
             if peft.modules_to_save is not None else [n for n in modules if n in heads])
    saved = [n for n in saved if not any(n.startswith(o + ".") for o in saved)]  # classifier, not classifier.dense
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
    odd = [n for n in targets if peft.method is PeftMethod.qlora and root.get_submodule(n).weight.numel() % NF4_BLOCK]
    if odd:
        shape = list(root.get_submodule(odd[0]).weight.shape)
        raise PeftTargetError(f"peft=qlora: {odd[0]}'s weight {shape} does not fill whole NF4 blocks of {NF4_BLOCK} "
                              f"values ({len(odd)} target(s) like it). Leave it out of peft.target_modules, or use "
                              "peft=lora.")
    return AdapterPlan(root_name, tuple(targets), tuple(saved))


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
                f"{key}: {pattern!r} matches no module of {type(model).__name__}: a name matches a module's path or "
                f"its end after a dot (q_proj matches model.layers.0.self_attn.q_proj). {listing}. Give some of "
                f"these, or {empty}.")
    return [n for n in modules if any(matches(n, p) for p in patterns)]


def oriented(module: Any) -> tuple[int, int]:
    """``(out_features, in_features)`` of a linear (``nn.Linear``: weight [out, in]; ``Conv1D``: [in, out])."""
    from torch import nn

    out, inp = module.weight.shape
    return (int(out), int(inp)) if isinstance(module, nn.Linear) else (int(inp), int(out))


def adapted_shapes(model: Any, plan: AdapterPlan, peft: PeftConfig, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """The state-dict shapes (keys under ``prefix``) the unadapted ``model`` has once adapted: each target gains
    ``lora_A`` and ``lora_B``, and under QLoRA its weight becomes the NF4 buffers."""
    root_name, root = adapter_root(model)
    head = f"{prefix}{root_name}." if root_name else prefix
    shapes = {f"{prefix}{k}": tuple(v.shape) for k, v in model.state_dict().items()}
    for name in plan.targets:
        out, inp = oriented(root.get_submodule(name))
        shapes[f"{head}{name}.lora_A.weight"], shapes[f"{head}{name}.lora_B.weight"] = (peft.r, inp), (out, peft.r)
        if peft.method is PeftMethod.qlora:
            numel = out * inp
            del shapes[f"{head}{name}.weight"]
            shapes.update({f"{head}{name}.weight_codes": (numel // 2,),
                           f"{head}{name}.weight_scalers": (numel // NF4_BLOCK,),
                           f"{head}{name}.weight_factor": (numel // NF4_BLOCK // nf4_scaler_block(numel),),
                           f"{head}{name}.weight_mean": (), f"{head}{name}.weight_lut": (16,)})
    return shapes


def state_shapes(model: Any, peft: PeftConfig, prefix: str = "") -> dict[str, tuple[int, ...]] | None:
    """The state-dict shapes of ``model`` as the run trains it; None when the adapter cannot be planned."""
    if peft.method is PeftMethod.none:
        return {f"{prefix}{k}": tuple(v.shape) for k, v in model.state_dict().items()}
    try:
        return adapted_shapes(model, resolve_plan(model, peft), peft, prefix)
    except PeftTargetError:
        return None


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
    """The meta-device model and its plan; or the refusal; or None when the model does not build on the meta device."""
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
    """The targets name linears the model has (under QLoRA, each filling whole NF4 blocks): :func:`resolve_plan`."""
    if not _on(cfg):
        return None
    found = _plan(cfg)
    return None if isinstance(found, tuple) else found


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
    """Each module whose weights differ, with both shapes; modules alike but for their layer index named once."""
    by_module: dict[str, list[tuple[str, tuple[int, ...], tuple[int, ...]]]] = {}
    for k in keys:
        name = k.removeprefix(_PREFIX)
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


def check_qlora(cfg: RunConfig) -> str | None:
    """QLoRA's NF4 runs here: torchao imports and round-trips a block on the run's device."""
    if cfg.peft.method is not PeftMethod.qlora:
        return None
    from runner.torch_internals import nf4

    problem = nf4.nf4_problem(cfg.trainer.single_device())  # the CPU, or the run's (first) device
    if problem is None:
        return None
    return (f"peft=qlora stores the frozen base weights in 4-bit NF4 through torchao, which cannot run here: "
            f"{problem}. Install torchao (pip install 'runner[peft]'), or train the same adapter over full-precision "
            "base weights with peft=lora.")


CHECKS = [check_peft_numbers, check_peft_targets, check_peft_path, check_qlora]
