"""Config: typed schema, Hydra registration, loading and cross-group validation."""

from runner.config.errors import ConfigError
from runner.config.layers import CONF_DIR
from runner.config.load import compose, load
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
