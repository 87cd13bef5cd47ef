"""Config, in four parts, each a package, and below them what they share.

- ``schema``: the typed schema of every node (``RunConfig`` and each group's; the closed options with their rows;
  the open ``_target_`` nodes, the model families, the data options);
- ``checks``: every check a composed config passes before anything runs, one module a part of the config
  (``checks.validate`` runs them all);
- ``rules``: the decisions the checks and the code at fit time share, each written once (the compile stack's
  refusals, the chunked loss, an adapter's targets, the defaults the GPU rows decide);
- ``composing``: from the command line and the YAML layers to a validated ``RunConfig`` through Hydra (``precheck``,
  ``loading``, ``store``, Hydra's errors in runner's words, ``--help``, the recipes, the layers, run directories).

Beside them: ``errors`` (``ConfigError``, "did you mean"), ``paths`` (where a run keeps its files),
``target_objects`` (what a ``_target_`` names, and the model on the meta device), ``cache_secret`` (the compile
cache's secret) and ``tune`` (``runner tune``'s own config).

``compose`` and ``load`` (Hydra and OmegaConf) are imported when first used: the schema, the checks and
everything a ``CompileStrategy`` in a user's own Trainer needs import without Hydra installed.
"""

from typing import Any

from runner.config.composing.layers import CONF_DIR
from runner.config.composing.recipe_files import recipes
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
