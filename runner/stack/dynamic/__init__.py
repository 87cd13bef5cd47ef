"""Dynamic-shape policies: how batches whose sizes vary are presented to the compiler."""

from runner.stack.dynamic.agreement import Agreement, ShapeAgreement, resolve_agreement
from runner.stack.dynamic.policy import (
    RecompileAfterWarmupError,
    ShapePolicyComponent,
    build_shape_policy,
    resolve_bounds,
    resolve_dynamic_arg,
    resolve_pad_to,
)

__all__ = [
    "Agreement",
    "RecompileAfterWarmupError",
    "ShapeAgreement",
    "ShapePolicyComponent",
    "build_shape_policy",
    "resolve_agreement",
    "resolve_bounds",
    "resolve_dynamic_arg",
    "resolve_pad_to",
]
