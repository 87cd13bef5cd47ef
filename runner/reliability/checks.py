"""Config checks added by the reliability work: out-of-range values, names torch does not know, and
combinations that cannot work, each one message naming the key, the value and the fix.

``runner.config.validate`` runs ``CHECKS`` with its own (errors) and ``WARNINGS`` (logged once,
the run goes on). Each check is a small pure function of the typed ``RunConfig``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

import torch

from runner.config.schema import CudaGraphMode, OnError, RunConfig, Scope

log = logging.getLogger(__name__)

Check = Callable[[RunConfig], "str | None"]

_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_ACCELERATORS = ("cpu", "cuda", "gpu", "mps", "auto")
_MAX_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}:\d{2}$")


def _positive(values: dict[str, object]) -> str | None:
    for key, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            return f"{key}={value} must be positive; give a number > 0."
    return None


def check_positive_counts(cfg: RunConfig) -> str | None:
    t = cfg.trainer
    return _positive({
        "trainer.val_check_interval": t.val_check_interval,
        "trainer.log_every_n_steps": t.log_every_n_steps,
        "trainer.checkpoint_every_n_steps": t.checkpoint_every_n_steps,
        "telemetry.log_every_n_steps": cfg.telemetry.log_every_n_steps,
        "data.batch_size": getattr(cfg.data, "batch_size", None),
        "data.seq_len": getattr(cfg.data, "seq_len", None),
        "optimizer.lr": getattr(cfg.optimizer, "lr", None),
    })


def check_non_negative(cfg: RunConfig) -> str | None:
    values = {
        "trainer.limit_val_batches": cfg.trainer.limit_val_batches,
        "trainer.gradient_clip_val": cfg.trainer.gradient_clip_val,
        "telemetry.speedup_steps": cfg.telemetry.speedup_steps,
        "reliability.max_skipped_steps": cfg.reliability.max_skipped_steps,
        "dynamic.warmup_steps": cfg.dynamic.warmup_steps,
        "cudagraphs.warmup_steps": cfg.cudagraphs.warmup_steps,
    }
    for key, value in values.items():
        if value is not None and value < 0:
            return f"{key}={value} must be >= 0 (0 disables it where that makes sense)."
    return None


def check_fractions(cfg: RunConfig) -> str | None:
    for key, value in (("data.val_fraction", getattr(cfg.data, "val_fraction", None)),
                       ("model.dropout", getattr(cfg.model, "dropout", None))):
        if isinstance(value, (int, float)) and not 0.0 <= value < 1.0:
            return f"{key}={value} must be in [0, 1), e.g. {key}=0.1."
    return None


def check_backend(cfg: RunConfig) -> str | None:
    backend = cfg.compile.backend
    if cfg.compile.scope is Scope.none:
        return None  # nothing is compiled
    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        return (f"compile.backend={backend} is not a torch.compile backend. Use one of inductor, aot_eager, eager "
                f"(all registered: {', '.join(b for b in known if 'TESTING' not in b)}).")
    return None


def check_mode(cfg: RunConfig) -> str | None:
    mode = cfg.compile.mode
    if mode is not None and mode not in _MODES:
        return f"compile.mode={mode} is not an Inductor mode; use one of {', '.join(_MODES)} (or null)."
    if mode == "reduce-overhead":
        return ("compile.mode=reduce-overhead: CUDA graphs are configured by the cudagraphs group. Use "
                "cudagraphs=reduce_overhead (or +cudagraphs.mode=reduce_overhead) and leave compile.mode unset.")
    return None


def check_fullgraph(cfg: RunConfig) -> str | None:
    c = cfg.compile
    if not c.fullgraph:
        return None
    if c.on_error is OnError["eager"]:
        return ("compile.fullgraph=true with compile.on_error=eager: under fullgraph torch raises on any graph break "
                "even when errors are suppressed, so there is no frame to fall back from. Set "
                "compile.fullgraph=false to allow eager fallbacks, or compile.on_error=raise to fail on breaks.")
    if c.scope is Scope.none:
        return ("compile.fullgraph=true with compile.scope=none: nothing is compiled, so fullgraph has no effect. "
                "Pick a scope (compile=step) or drop compile.fullgraph.")
    return None


def check_accelerator(cfg: RunConfig) -> str | None:
    acc = cfg.trainer.accelerator
    if acc not in _ACCELERATORS:
        return f"trainer.accelerator={acc} is not one of {', '.join(_ACCELERATORS)}."
    if acc in ("cuda", "gpu") and not torch.cuda.is_available():
        return (f"trainer.accelerator={acc} but this machine has no CUDA device (torch {torch.__version__}). "
                "Use trainer=cpu (trainer.accelerator=cpu).")
    return None


def check_max_time(cfg: RunConfig) -> str | None:
    mt = cfg.trainer.max_time
    if mt is not None and not _MAX_TIME.match(mt):
        return f"trainer.max_time={mt} must be DD:HH:MM:SS, e.g. trainer.max_time=00:01:30:00 for 90 minutes."
    return None


def check_resume_path(cfg: RunConfig) -> str | None:
    path = cfg.ckpt_path
    if path is None or path in ("last", "best", "hpc", "registry") or "://" in path:
        return None
    if not Path(path).expanduser().exists():
        return (f"ckpt_path={path} does not exist. Give an existing .ckpt file, or resume a run in place with "
                "hydra.run.dir=<its run dir> ckpt_path=last.")
    return None


def check_cache_artifacts(cfg: RunConfig) -> str | None:
    from runner.reliability.compile_cache import resolve_artifacts_path

    src = cfg.reliability.load_cache_artifacts
    if src is not None and not resolve_artifacts_path(src).exists():
        return (f"reliability.load_cache_artifacts={src}: no artifacts there (looked for "
                f"{resolve_artifacts_path(src)}). Point it at a finished run's directory (its "
                "compile_cache/artifacts.bin) or drop it.")
    return None


def warn_cudagraphs_on_cpu(cfg: RunConfig) -> str | None:
    if cfg.cudagraphs.mode is not CudaGraphMode.disabled and cfg.trainer.accelerator == "cpu":
        return (f"cudagraphs.mode={cfg.cudagraphs.mode.value} on trainer.accelerator=cpu: CUDA graphs need a CUDA "
                "device and are skipped here (reported as inactive). Use cudagraphs=disabled on CPU.")
    return None


CHECKS: list[Check] = [
    check_positive_counts,
    check_non_negative,
    check_fractions,
    check_backend,
    check_mode,
    check_fullgraph,
    check_accelerator,
    check_max_time,
    check_resume_path,
    check_cache_artifacts,
]

WARNINGS: list[Check] = [warn_cudagraphs_on_cpu]

_warned: set[str] = set()


def emit_warnings(cfg: RunConfig) -> list[str]:
    """Log each warning once per process (the config is loaded twice: precheck, then the run)."""
    messages = [msg for check in WARNINGS if (msg := check(cfg))]
    for msg in messages:
        if msg not in _warned:
            _warned.add(msg)
            log.warning("config warning: %s", msg)
    return messages
