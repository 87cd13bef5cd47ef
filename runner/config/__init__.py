"""Config: the typed schema (``schema``, and beside it ``schema_*``, ``families``, ``data_schemas``, ``targets``),
Hydra registration (``store``), loading (``loading``; ``precheck`` on the command line before Hydra makes a run
directory), every check and its one-paragraph wording (``validate``, ``checks_*``, ``input_checks``, ``messages``,
``errors``), the closed options' properties (``options``) and the rules the stack enforces too (``rules``; the chunked
loss's, ``loss_rules``), where config files come from and which recipes exist (``layers``, ``recipe_files``),
``--help`` (``help_text``), where a run keeps its files (``paths``), the compile cache's secret (``cache_secret``) and
``runner tune``'s config (``tune``).

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
