"""Config: ``schema`` (the typed nodes, the closed options with their rows), ``decisions`` (each decision one
``resolve_*`` function, called by its check before the run and by the fit), ``checks`` (the rest of what a composed
config passes before anything runs) and ``composing`` (from the command line and the YAML layers through Hydra to
a validated ``RunConfig``). ``compose`` and ``load`` import Hydra when first used: a ``CompileStrategy`` in a
user's own Trainer imports none of it.
"""

from typing import Any

from runner.config.composing.layers import CONF_DIR, recipes
from runner.config.errors import ConfigError
from runner.config.schema import (
    AfterWarmup,
    Background,
    CompileConfig,
    CudaGraphMode,
    CudaGraphsConfig,
    DynamicConfig,
    OffloadConfig,
    OffloadStrategy,
    OnError,
    OptimizerPolicy,
    RunConfig,
    Scope,
    ShapePolicy,
    TelemetryConfig,
    TrainerConfig,
)

__all__ = [
    "CONF_DIR",
    "AfterWarmup",
    "Background",
    "CompileConfig",
    "ConfigError",
    "CudaGraphMode",
    "CudaGraphsConfig",
    "DynamicConfig",
    "OffloadConfig",
    "OffloadStrategy",
    "OnError",
    "OptimizerPolicy",
    "RunConfig",
    "Scope",
    "ShapePolicy",
    "TelemetryConfig",
    "TrainerConfig",
    "compose",
    "load",
    "recipes",
]


def __getattr__(name: str) -> Any:
    if name in ("compose", "load"):
        from runner.config.composing import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'runner.config' has no attribute {name!r}")
