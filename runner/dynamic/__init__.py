"""Dynamic-shape policies: how batches whose sizes vary are presented to the compiler."""

from runner.dynamic.policy import ShapePolicyComponent, build_shape_policy

__all__ = ["ShapePolicyComponent", "build_shape_policy"]
