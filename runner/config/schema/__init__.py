"""Typed schema of every config node.

Hydra composes YAML from ``conf/`` and ``recipes/``; these dataclasses give every node a type, so a
wrong key or a wrong type fails at composition with the key named. ``OmegaConf.to_object`` turns the
composed config into these objects once (``runner.config.composing.loading``), and ``runner.config.checks.validate``
checks their combination there; everything downstream receives typed objects, never a ``DictConfig``.

Nodes that users swap (model, data, optimizer, scheduler, loggers) are open ``_target_`` nodes.
Compile policies are closed enums, checked together in ``runner.config.checks.validate``; the three whose options
behave differently (``Scope``, ``ShapePolicy``, ``OffloadStrategy``) are declared with what each option does in
``options``.

A module a part: ``run`` (``RunConfig`` and the run's own nodes: compile, CUDA graphs, dynamic shapes, offload,
trainer, telemetry, reliability), ``options`` (the closed options of the compile stack and each one's row),
``after``, ``fsdp``, ``loss``, ``objective`` and ``peft`` (one group each), ``targets`` (the open ``_target_``
nodes runner ships and the names they are registered under), ``families`` (Hugging Face and timm models) and
``data`` (the data options). The run's nodes and each group's root node are imported from here; a group's own
enums and helpers (``PeftMethod``, ``Chunked``, ``resolve_reference``, the data schemas) from its module.
"""

from runner.config.schema.after import AfterConfig
from runner.config.schema.fsdp import Distributed, FsdpConfig, FsdpMixedPrecision
from runner.config.schema.loss import LossConfig
from runner.config.schema.objective import ObjectiveConfig
from runner.config.schema.options import OffloadStrategy, Scope, ShapePolicy
from runner.config.schema.peft import PeftConfig
from runner.config.schema.run import (
    AfterWarmup,
    Background,
    CacheTrust,
    CompileConfig,
    CudaGraphMode,
    CudaGraphsConfig,
    DynamicConfig,
    OffloadConfig,
    OnError,
    OnNonFinite,
    OptimizerPolicy,
    ReliabilityConfig,
    RunConfig,
    TelemetryConfig,
    TrainerConfig,
)

__all__ = [
    "AfterConfig",
    "AfterWarmup",
    "Background",
    "CacheTrust",
    "CompileConfig",
    "CudaGraphMode",
    "CudaGraphsConfig",
    "Distributed",
    "DynamicConfig",
    "FsdpConfig",
    "FsdpMixedPrecision",
    "LossConfig",
    "ObjectiveConfig",
    "OffloadConfig",
    "OffloadStrategy",
    "OnError",
    "OnNonFinite",
    "OptimizerPolicy",
    "PeftConfig",
    "ReliabilityConfig",
    "RunConfig",
    "Scope",
    "ShapePolicy",
    "TelemetryConfig",
    "TrainerConfig",
]
