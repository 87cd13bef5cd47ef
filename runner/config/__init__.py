"""Config: typed schema, Hydra registration, loading and cross-group validation.

``compose`` and ``load`` (Hydra and OmegaConf) are imported when first used: the schema, the checks and
everything a ``CompileStrategy`` in a user's own Trainer needs import without Hydra installed.
"""

from typing import Any

from runner.config.errors import ConfigError
from runner.config.layers import CONF_DIR
from runner.config.recipe_files import recipes
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
        from runner.config import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'runner.config' has no attribute {name!r}")
