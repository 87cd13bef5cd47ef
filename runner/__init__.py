"""runner: config-driven PyTorch training with the torch.compile stack on every step.

``python -m runner +recipe=NAME [overrides]`` trains (``runner.run.run`` from a ``RunConfig``); in your own code,
``lightning.Trainer(strategy=runner.CompileStrategy())`` or ``strategy="compile"``. The exports below are imported
on first use: ``import runner`` imports neither torch nor Lightning.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

_EXPORTS = {
    "CompileStrategy": "runner.strategy",
    "DDPCompileStrategy": "runner.strategy",
    "FSDPCompileStrategy": "runner.strategy",
    "CompileSettings": "runner.stack",
    "CompileConfig": "runner.config.schema",
    "CudaGraphsConfig": "runner.config.schema",
    "DynamicConfig": "runner.config.schema",
    "OffloadConfig": "runner.config.schema",
    "CudaGraphMode": "runner.config.schema",
    "OffloadStrategy": "runner.config.schema",
    "OnError": "runner.config.schema",
    "OptimizerPolicy": "runner.config.schema",
    "Scope": "runner.config.schema",
    "ShapePolicy": "runner.config.schema",
    "AfterWarmup": "runner.config.schema",
    "Background": "runner.config.schema",
    "CacheTrust": "runner.config.schema",
    "PeftConfig": "runner.config.schema.peft",
    "PeftMethod": "runner.config.schema.peft",
    "apply_peft": "runner.peft",
}
__all__ = sorted(_EXPORTS)

STRATEGY_NAMES = {
    "compile": ("CompileStrategy", "one device, runner's whole compile stack"),
    "compile_ddp": ("DDPCompileStrategy", "DDP with runner's compile stack inside the wrapper"),
    "compile_fsdp": ("FSDPCompileStrategy", "FSDP2 with runner's compile stack applied per block before sharding"),
}
_LIGHTNING_STRATEGIES = "lightning.pytorch.strategies"


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runner' has no attribute {name!r}")


def _factory(class_name: str) -> Callable[..., Any]:
    def make(**kwargs: Any) -> Any:  # imported when a Trainer asks for it, not while Lightning imports
        return getattr(importlib.import_module("runner.strategy"), class_name)(**kwargs)

    make.__name__ = make.__qualname__ = class_name
    return make


def register_strategy_names(module: ModuleType | None = None) -> None:
    """Add runner's strategies to Lightning's ``StrategyRegistry`` (names already taken are left alone)."""
    registry = (module or sys.modules[_LIGHTNING_STRATEGIES]).StrategyRegistry
    for name, (class_name, description) in STRATEGY_NAMES.items():
        if name not in registry:
            registry.register(name, _factory(class_name), description=description)


# Lightning finds strategies only among the classes of lightning.pytorch.strategies itself (_register_classes; no
# entry points), and `import runner` must not import Lightning: so when runner comes first, this finder registers the
# names right after Lightning's strategies module executes. Kept as the simplest hook that works in either order.
class _RegisterWhenImported(importlib.abc.MetaPathFinder):
    """Registers the names right after ``lightning.pytorch.strategies`` executes (then removes itself)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != _LIGHTNING_STRATEGIES:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module: ModuleType) -> None:
            exec_module(module)
            register_strategy_names(module)

        spec.loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


if _LIGHTNING_STRATEGIES in sys.modules:
    register_strategy_names()
elif not any(isinstance(f, _RegisterWhenImported) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWhenImported())
