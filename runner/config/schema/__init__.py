"""Typed schema of every config node (a wrong key or type fails at composition): open ``_target_`` nodes for what
users swap, closed enums for the compile policies. Each group's root node is imported from here."""
# ruff: noqa: F401 - this module re-exports each group's root node

from runner.config.schema.after import AfterConfig, EvalConfig
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
