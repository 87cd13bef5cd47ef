"""Reliability: bad input, compile failures, non-finite losses, interruption and resume, caches.

Where each piece plugs in (``runner.build`` / ``runner.run``):

* ``AtomicCheckpointIO``: the Trainer's checkpoint plugin, so every ``last.ckpt`` is written atomically.
* ``make_resumable``: the datamodule's train loader resumes mid-epoch at the exact batch.
* ``build_reliability_callbacks``: ``NonFiniteGuard`` (stop/skip), ``GracefulInterrupt``
  (SIGINT/SIGTERM -> checkpoint), ``CompileErrorCallback`` (recompile limits, eager fallbacks) and
  ``CompileCacheArtifacts`` (save/load torch's compile-cache artifacts).
* ``RunStopped`` subclasses (``CompileFailure``, ``NonFiniteLossError``): one-paragraph messages
  that ``python -m runner`` prints without a traceback, with distinct exit codes.

Resume a stopped run in place: ``python -m runner <same overrides> hydra.run.dir=<run dir> ckpt_path=last``.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import Callback

from runner.config.schema import RunConfig
from runner.reliability.checkpoint_io import AtomicCheckpointIO, atomic_torch_save
from runner.reliability.compile_cache import CompileCacheArtifacts
from runner.reliability.compile_errors import CompileErrorWatch, CompileFailure, explain_compile_error
from runner.reliability.errors import RunStopped
from runner.reliability.numerics import NonFiniteGuard, NonFiniteLossError
from runner.reliability.resumable_data import ResumableDataLoader, make_resumable
from runner.reliability.signals import GracefulInterrupt, exit_code, flush_loggers
from runner.reliability.watch import CompileErrorCallback

__all__ = [
    "AtomicCheckpointIO",
    "CompileCacheArtifacts",
    "CompileErrorCallback",
    "CompileErrorWatch",
    "CompileFailure",
    "GracefulInterrupt",
    "NonFiniteGuard",
    "NonFiniteLossError",
    "ResumableDataLoader",
    "RunStopped",
    "atomic_torch_save",
    "build_reliability_callbacks",
    "exit_code",
    "explain_compile_error",
    "flush_loggers",
    "last_checkpoint_path",
    "make_resumable",
]


def last_checkpoint_path(run_dir: str | Path) -> Path:
    """Where ``ModelCheckpoint(save_last=True)`` keeps ``last.ckpt``; ``ckpt_path=last`` finds it there."""
    return Path(run_dir) / "checkpoints" / "last.ckpt"


def build_reliability_callbacks(cfg: RunConfig) -> list[Callback]:
    """The reliability callbacks for a run, from the ``reliability`` and ``compile`` groups."""
    r = cfg.reliability
    last = last_checkpoint_path(cfg.run_dir)
    callbacks: list[Callback] = [
        NonFiniteGuard(r.on_nonfinite, last, r.max_skipped_steps),
        CompileErrorCallback(cfg.compile.on_error),
        CompileCacheArtifacts(Path(cfg.run_dir), save=r.save_cache_artifacts, load=r.load_cache_artifacts),
    ]
    if r.checkpoint_on_interrupt:
        callbacks.append(GracefulInterrupt(last))
    return callbacks
