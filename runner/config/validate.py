"""Cross-group checks: combinations that cannot work are refused before any work starts.

Each check is one small function returning an error message or None; ``validate`` runs them all and
raises one ``ConfigError`` listing every problem, each naming the key, the value and the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from runner.config.load import ConfigError
from runner.config.schema import AfterWarmup, CudaGraphMode, OffloadStrategy, RunConfig, Scope, ShapePolicy
from runner.config.targets import Batching
from runner.reliability import checks as reliability_checks

_PRECISIONS = {"32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true", "transformer-engine"}


def _distributed(cfg: RunConfig) -> bool:
    from runner.build import is_distributed

    return is_distributed(cfg)


def check_step_backward_ddp(cfg: RunConfig) -> str | None:
    if cfg.compile.scope is Scope.step_backward and _distributed(cfg):
        return ("compile.scope=step_backward runs backward inside the forward call, which DDP's gradient reducer "
                "cannot synchronise. Use compile.scope=step (backward still runs compiled) with DDP.")
    return None


def check_compiled_autograd_ddp(cfg: RunConfig) -> str | None:
    if cfg.compile.compiled_autograd and _distributed(cfg):
        return ("compile.compiled_autograd=true is not supported with DDP in runner yet (DDP's C++ reducer hooks "
                "are opaque to compiled autograd). Set compile.compiled_autograd=false or train on one device.")
    return None


def check_mode_and_options(cfg: RunConfig) -> str | None:
    if cfg.compile.mode is not None and cfg.compile.options:
        return (f"compile.mode={cfg.compile.mode} and compile.options={dict(cfg.compile.options)} are both set; "
                "torch.compile takes one or the other. Move the mode's settings into compile.options or drop one.")
    return None


def check_cudagraphs_unbacked(cfg: RunConfig) -> str | None:
    if cfg.cudagraphs.mode is CudaGraphMode.reduce_overhead and cfg.dynamic.policy is ShapePolicy.unbacked:
        return ("cudagraphs=reduce_overhead with dynamic.policy=unbacked: a CUDA graph records fixed sizes, and "
                "unbacked sizes are unknown until run time. Use dynamic=bucket (one graph per bucket) or "
                "cudagraphs=disabled.")
    return None


def check_buckets(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    if d.policy is not ShapePolicy.bucket:
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
    if d.policy is not ShapePolicy.bucket or not d.buckets or any(b <= 0 for b in d.buckets):
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
    if d.policy not in (ShapePolicy.dynamic, ShapePolicy.unbacked):
        return None
    if not d.dims:
        return f"dynamic.policy={d.policy.value} with dynamic.dims=[]: nothing would be marked. Use dynamic.dims=[1]."
    seq_len = getattr(cfg.data, "seq_len", None)
    if d.max is not None and isinstance(seq_len, int) and d.max < seq_len:
        return (f"dynamic.max={d.max} is below data.seq_len={seq_len}: longer batches would break the bound and "
                f"recompile. Set dynamic.max >= {seq_len} or null.")
    if d.policy is ShapePolicy.unbacked and d.min < 2:
        return (f"dynamic.policy=unbacked with dynamic.min={d.min}: without a lower bound of 2, causal attention "
                "cannot rule out an empty sequence, graph-breaks and falls back to eager. Use dynamic.min=2.")
    return None


def check_after_warmup(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    if d.after_warmup is not AfterWarmup.none and d.warmup_steps < 1:
        return (f"dynamic.after_warmup={d.after_warmup.value} with dynamic.warmup_steps={d.warmup_steps}: the stance "
                "would apply to the very first compile. Give at least 1 warm-up step.")
    return None


def check_fp8(cfg: RunConfig) -> str | None:
    if cfg.offload.strategy is OffloadStrategy.fp8 and not hasattr(torch, "float8_e4m3fn"):
        return (f"offload=fp8 needs torch.float8_e4m3fn, which torch {torch.__version__} lacks. "
                "Use offload=bf16 or upgrade torch.")
    return None


def check_memory_budget(cfg: RunConfig) -> str | None:
    b = cfg.offload.memory_budget
    if b is not None and not 0.0 < b < 1.0:
        return f"offload.memory_budget={b} must be in (0, 1) (a fraction of the activations kept), or null."
    return None


def check_data_path(cfg: RunConfig) -> str | None:
    path = getattr(cfg.data, "path", None)
    if path is not None and not Path(path).expanduser().exists():
        return (f"data.path={path} does not exist. Point data.path at a directory or file of text, "
                "or drop it (data.path=null) to use the Python stdlib source.")
    return None


def check_length_grouping(cfg: RunConfig) -> str | None:
    grouping = getattr(cfg.data, "length_grouping", 0)
    if not isinstance(grouping, int) or grouping == 0:
        return None
    if grouping < 0:
        return f"data.length_grouping={grouping} must be >= 0 (batches per sorting window; 0 turns it off)."
    if getattr(cfg.data, "batching", None) is not Batching.documents:
        return (f"data.length_grouping={grouping} groups documents of similar length, but data.batching is "
                "packed (every window has the same length). Use data=text_documents or drop data.length_grouping.")
    return None


def check_model_fits_data(cfg: RunConfig) -> str | None:
    block = getattr(cfg.model, "block_size", None)
    seq_len = getattr(cfg.data, "seq_len", None)
    if isinstance(block, int) and isinstance(seq_len, int) and seq_len > block:
        return f"data.seq_len={seq_len} exceeds model.block_size={block}: raise model.block_size or lower data.seq_len."
    n_embd, n_head = getattr(cfg.model, "n_embd", None), getattr(cfg.model, "n_head", None)
    if isinstance(n_embd, int) and isinstance(n_head, int) and (n_head <= 0 or n_embd % n_head):
        return f"model.n_embd={n_embd} must be divisible by model.n_head={n_head}."
    return None


def check_trainer(cfg: RunConfig) -> str | None:
    t = cfg.trainer
    if t.precision not in _PRECISIONS:
        return (f"trainer.precision={t.precision} is not one of {sorted(_PRECISIONS)}; "
                "on a CPU use 32-true or bf16-mixed.")
    if t.max_steps <= 0 and t.max_time is None:
        return f"trainer.max_steps={t.max_steps}: give a positive number of steps (or trainer.max_time)."
    if t.accumulate_grad_batches < 1:
        return f"trainer.accumulate_grad_batches={t.accumulate_grad_batches} must be at least 1."
    return None


CHECKS: list[Callable[[RunConfig], str | None]] = [
    check_step_backward_ddp,
    check_compiled_autograd_ddp,
    check_mode_and_options,
    check_cudagraphs_unbacked,
    check_buckets,
    check_dynamic_bounds,
    check_bucket_fits,
    check_shape_marks,
    check_after_warmup,
    check_fp8,
    check_memory_budget,
    check_data_path,
    check_length_grouping,
    check_model_fits_data,
    check_trainer,
    *reliability_checks.CHECKS,  # ranges, torch names, fullgraph combinations (runner/reliability/checks.py)
]


def validate(cfg: RunConfig) -> None:
    """Raise ``ConfigError`` naming every impossible setting or combination, with its fix."""
    problems = [msg for check in CHECKS if (msg := check(cfg))]
    if problems:
        raise ConfigError(" ".join(problems))
    reliability_checks.emit_warnings(cfg)  # e.g. CUDA graphs on a CPU: logged once, the run goes on
