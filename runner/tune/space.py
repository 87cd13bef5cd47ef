"""Which compile-stack choices apply to this model and device, and each choice as overrides."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from runner.build import shapes_vary
from runner.config import CONF_DIR
from runner.config.schema import OffloadStrategy, RunConfig, Scope
from runner.config.tune import TuneSpace

# choice -> the config key it sets (dotted)
KEYS: dict[str, str] = {
    "scope": "compile.scope",
    "optimizer": "compile.optimizer",
    "precision": "trainer.precision",
    "shapes": "dynamic.policy",
    "offload": "offload.strategy",
    "cpp_wrapper": "compile.options.cpp_wrapper",
    "cudagraphs": "cudagraphs.mode",
}
# Eager Lightning in fp32: the baseline every trial's speed and loss is compared with.
EAGER: dict[str, Any] = {"scope": "none", "optimizer": "none", "precision": "32-true", "offload": "none"}


@dataclass
class Space:
    """The searched choices (name -> options, Optuna categorical values) and what was left out, why."""

    choices: dict[str, list[Any]]
    dropped: dict[str, str]


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def current_values(cfg: RunConfig) -> dict[str, Any]:
    """The recipe's own value of every choice (the default stack)."""
    return {
        "scope": cfg.compile.scope.value,
        "optimizer": cfg.compile.optimizer.value,
        "precision": cfg.trainer.precision,
        "shapes": cfg.dynamic.policy.value,
        "offload": cfg.offload.strategy.value,
        "cpp_wrapper": bool(cfg.compile.options.get("cpp_wrapper", False)),
        "cudagraphs": cfg.cudagraphs.mode.value,
    }


# CPU flags of bfloat16 matrix units. Without one, torch emulates bf16 matmuls on the CPU, ~100x slower than fp32 (1.4
# against 32-160 GFLOP/s on the AVX2-only CI machine): a bf16 trial there only spends the tune's time budget until the
# pruner stops it.
BF16_UNITS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags() -> frozenset[str]:
    """This machine's CPU flags (empty where /proc/cpuinfo does not exist)."""
    info = Path("/proc/cpuinfo")
    if not info.exists():
        return frozenset()
    for line in info.read_text().splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def resolve_space(space: TuneSpace, cfg: RunConfig, flags: frozenset[str] | None = None) -> Space:
    """The choices that apply to ``cfg``'s model and device, each with the recipe's own value added; ``flags``: the
    CPU's flags, which decide whether bf16 is searched on a CPU."""
    device = cfg.trainer.single_device() if not cfg.trainer.is_distributed() else cfg.trainer.accelerator
    cuda = str(device).startswith(("cuda", "gpu"))
    inductor = cfg.compile.backend == "inductor"
    dropped: dict[str, str] = {}
    choices: dict[str, list[Any]] = {name: [_plain(v) for v in getattr(space, name)] for name in KEYS}
    if not shapes_vary(cfg):
        dropped["shapes"] = "every batch has the same shape (packed text or synthetic data): no shape policy differs"
    if not inductor:
        dropped["cpp_wrapper"] = f"an Inductor option, and compile.backend={cfg.compile.backend}"
    if not (cuda and inductor):
        dropped["cudagraphs"] = "CUDA graphs need a CUDA device and Inductor"
    if not cuda:
        choices["offload"] = [o for o in choices["offload"] if not OffloadStrategy[o].row.cuda_only]
    if not cuda and not BF16_UNITS & (cpu_flags() if flags is None else flags):
        bf16 = [p for p in choices["precision"] if "bf16" in str(p)]
        if bf16:
            choices["precision"] = [p for p in choices["precision"] if p not in bf16]
            dropped["precision_bf16"] = (f"{', '.join(bf16)} left out: this CPU has no bfloat16 matrix units "
                                         "(no avx512_bf16/amx_bf16 flag), so bf16 matmuls are emulated, ~100x "
                                         "slower than fp32")
    if cfg.trainer.is_distributed():
        choices["scope"] = [s for s in choices["scope"] if Scope[s].row.under_ddp]
    current = current_values(cfg)
    for name, options in choices.items():
        if current[name] not in options:
            options.insert(0, current[name])
    for name in list(choices):
        if name in dropped:
            del choices[name]
        elif len(choices[name]) == 1:
            dropped[name] = f"one option only ({choices.pop(name)[0]})"
    return Space(choices=choices, dropped=dropped)


def param_overrides(params: dict[str, Any]) -> list[str]:
    """A trial's values as Hydra overrides (``compile.scope=step``, ``++compile.options.cpp_wrapper=true``)."""
    out = []
    for name, value in params.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        prefix = "++" if name == "cpp_wrapper" else ""  # a key of an open dict: add or replace
        out.append(f"{prefix}{KEYS[name]}={text}")
    return out


def recipe_groups(params: dict[str, Any]) -> dict[str, str]:
    """The choices one of runner's group options makes by itself, as ``{choice: option}``: a defaults-list selection
    still gives way to a command line's ``compile=model``, a body field would not."""
    out: dict[str, str] = {}
    for name, value in params.items():
        group, _, leaf = KEYS[name].partition(".")
        if "." in leaf:  # a key of an open dict (compile.options.*): no option file sets it alone
            continue
        tuned = {KEYS[n].partition(".")[2] for n in params if KEYS[n].startswith(f"{group}.")}
        for path in sorted((CONF_DIR / group).glob("*.yaml")):
            option = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if option.get(leaf) == _plain(value) and set(option) <= tuned:
                out[name] = path.stem
                break
    return out

