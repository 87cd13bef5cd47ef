"""Checks of the ``dynamic`` group (the dynamic-shape policy) against the data and model it shapes.
Each is a small pure function of the typed ``RunConfig`` returning one message (key, value, fix) or
None; ``runner.config.checks.stack`` lists them among the compile stack's checks, in this order.
"""

from __future__ import annotations

import torch

from runner import torch_internals as ti
from runner.config.schema import AfterWarmup, RunConfig
from runner.config.schema.options import Mark


def check_buckets(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    if not d.policy.row.takes_buckets:
        return None
    if not d.buckets or any(b <= 0 for b in d.buckets):
        return (f"dynamic.policy=bucket needs positive dynamic.buckets (got {list(d.buckets)}), "
                "e.g. dynamic.buckets=[64,128,256,512].")
    seq_len = getattr(cfg.data, "seq_len", None)
    if seq_len is not None and max(d.buckets) < seq_len:
        return (f"dynamic.buckets={list(d.buckets)}: the largest bucket is below data.seq_len={seq_len}, so the "
                f"longest sequences would not fit. Add a bucket >= {seq_len}.")
    return None


def check_dynamic_bounds(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    if d.min < 0 or (d.max is not None and d.max <= d.min):
        return f"dynamic.min={d.min}, dynamic.max={d.max}: need 0 <= min < max (or max=null)."
    if d.recompile_limit < 1:
        return f"dynamic.recompile_limit={d.recompile_limit} must be at least 1."
    return None


def check_bucket_fits(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    if not d.policy.row.takes_buckets or not d.buckets or any(b <= 0 for b in d.buckets):
        return None
    if len(set(d.buckets)) > d.recompile_limit:
        return (f"dynamic.buckets has {len(set(d.buckets))} buckets but dynamic.recompile_limit={d.recompile_limit}: "
                "each bucket compiles its own graph, and past the limit torch silently runs eagerly. Raise "
                f"dynamic.recompile_limit to >= {len(set(d.buckets))} or use fewer buckets.")
    seq_len, block = getattr(cfg.data, "seq_len", None), getattr(cfg.model, "block_size", None)
    if isinstance(seq_len, int) and isinstance(block, int):
        longest = min((b for b in d.buckets if b >= seq_len), default=None)
        if longest is not None and longest > block:
            return (f"dynamic.buckets={list(d.buckets)} pads data.seq_len={seq_len} up to {longest} tokens, beyond "
                    f"model.block_size={block} (the position embedding). Add a bucket equal to {seq_len}.")
    return None


def check_shape_marks(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    row = d.policy.row
    if not row.marks_dims:
        return None
    if not d.dims:
        return f"dynamic.policy={d.policy.value} with dynamic.dims=[]: nothing would be marked. Use dynamic.dims=[1]."
    seq_len = getattr(cfg.data, "seq_len", None)
    if d.max is not None and isinstance(seq_len, int) and d.max < seq_len:
        return (f"dynamic.max={d.max} is below data.seq_len={seq_len}: longer batches would break the bound and "
                f"recompile. Set dynamic.max >= {seq_len} or null.")
    if d.min < row.min_length:
        return (f"dynamic.policy={d.policy.value} with dynamic.min={d.min}: without a lower bound of "
                f"{row.min_length}, causal attention cannot rule out an empty sequence, graph-breaks and falls back "
                f"to eager. Use dynamic.min={row.min_length}.")
    if row.mark is Mark.unbacked and ti.unbacked_bounds_unsupported():
        return (f"dynamic.policy=unbacked on torch {torch.__version__}: its mark_unbacked takes no lower bound (torch "
                "2.13 and later do), so causal attention cannot rule out an empty sequence, graph-breaks and falls "
                "back to eager. Use dynamic=dynamic (one graph for every length), or torch>=2.13.")
    return None


def check_after_warmup(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    if d.after_warmup is not AfterWarmup.none and d.warmup_steps < 1:
        return (f"dynamic.after_warmup={d.after_warmup.value} with dynamic.warmup_steps={d.warmup_steps}: the stance "
                "would apply to the very first compile. Give at least 1 warm-up step.")
    return None


CHECKS = [
    check_buckets,
    check_dynamic_bounds,
    check_bucket_fits,
    check_shape_marks,
    check_after_warmup,
]
