"""The ``dynamic`` group as a stack component.

``static`` and ``bucket`` are data-side policies (the collate pads to fixed lengths, and compiling
with ``dynamic=False`` gives one static graph per length); ``automatic`` leaves torch's automatic
dynamic on; ``dynamic`` and ``unbacked`` mark the configured dims of every input tensor before the
compiled step sees them, so the first graph is already dynamic.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import torch

from runner.config.schema import AfterWarmup, DynamicConfig, ShapePolicy
from runner.data.text import PadTo
from runner.strategy.component import StackComponent


def resolve_dynamic_arg(policy: ShapePolicy) -> bool | None:
    """``torch.compile(dynamic=...)`` for the policy: padded policies compile static graphs only."""
    return False if policy in (ShapePolicy.static, ShapePolicy.bucket) else None


def resolve_pad_to(cfg: DynamicConfig, max_len: int) -> PadTo:
    """Where the collate pads a batch: to ``max_len`` (static), the next bucket, or not at all."""
    if cfg.policy is ShapePolicy.static:
        return PadTo((max_len,))
    if cfg.policy is ShapePolicy.bucket:
        return PadTo(tuple(sorted(cfg.buckets)))
    return PadTo()


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, (list, tuple)):
        for b in batch:
            yield from _tensors(b)
    elif isinstance(batch, dict):
        for b in batch.values():
            yield from _tensors(b)


class ShapePolicyComponent(StackComponent):
    """Applies the shape policy: compiler settings once, dim marking per batch, and the stance
    after warm-up (inside the training step only, so validation shapes are unaffected)."""

    name = "dynamic"

    def __init__(self, cfg: DynamicConfig) -> None:
        self.cfg = cfg
        self.dynamic_arg = resolve_dynamic_arg(cfg.policy)
        self.steps = 0

    def configure(self) -> None:
        import torch._dynamo.config as dynamo_config

        dynamo_config.recompile_limit = self.cfg.recompile_limit
        dynamo_config.specialize_float = self.cfg.specialize_float
        # Padded policies want one static graph per length, never a dynamic one.
        dynamo_config.automatic_dynamic_shapes = self.dynamic_arg is None

    def prepare_batch(self, batch: Any) -> Any:
        policy = self.cfg.policy
        if policy not in (ShapePolicy.dynamic, ShapePolicy.unbacked):
            return batch
        for t in _tensors(batch):
            for dim in self.cfg.dims:
                if dim >= t.dim():
                    continue
                if policy is ShapePolicy.dynamic:
                    torch._dynamo.mark_dynamic(t, dim, min=self.cfg.min, max=self.cfg.max)
                else:
                    torch._dynamo.decorators.mark_unbacked(t, dim)
        return batch

    @contextlib.contextmanager
    def _after_warmup(self) -> Iterator[None]:
        with torch.compiler.set_stance(self.cfg.after_warmup.value):
            yield

    def step_context(self) -> ContextManager[Any]:
        if self.cfg.after_warmup is AfterWarmup.none or self.steps < self.cfg.warmup_steps:
            return contextlib.nullcontext()
        return self._after_warmup()

    def on_step_end(self, step: int) -> None:
        self.steps = step

    def summary(self) -> dict[str, Any]:
        return {"dynamic/policy": self.cfg.policy.value, "dynamic/after_warmup": self.cfg.after_warmup.value}


def build_shape_policy(cfg: DynamicConfig) -> ShapePolicyComponent:
    return ShapePolicyComponent(cfg)
