"""Typed schema of every config node: a wrong key or type fails at composition, ``OmegaConf.to_object`` converts the
composed config once (``composing.loading``), and everything downstream receives typed objects. Open ``_target_`` nodes
for what users swap (model, data, optimizer, scheduler, loggers); closed enums for the compile policies, the three whose
options behave differently declared with their rows in ``options``. Each group's root node is imported from here; its
own enums and helpers from its module."""

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
