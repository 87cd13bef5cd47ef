"""Reliability: a run that stops keeps what it did (atomic checkpoints, SIGINT/SIGTERM at a step boundary,
non-finite losses, metric history on resume). docs/reliability.md says what each part guarantees."""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from runner.config.paths import last_checkpoint_path
from runner.config.schema import RunConfig
from runner.reliability.checkpoint_io import AtomicCheckpointIO
from runner.reliability.log_history import LogHistory
from runner.reliability.numerics import NonFiniteGuard, NonFiniteLossError
from runner.reliability.signals import GracefulInterrupt, exit_code, flush_loggers

# What runner.run, runner.build and the tests import from the package.
__all__ = ["AtomicCheckpointIO", "LogHistory", "NonFiniteLossError", "exit_code", "flush_loggers"]


def build_reliability_callbacks(cfg: RunConfig) -> list[Callback]:
    """The reliability callbacks for a run, from the ``reliability`` group."""
    r = cfg.reliability
    last = last_checkpoint_path(cfg.run_dir)
    callbacks: list[Callback] = [NonFiniteGuard(r.on_nonfinite, last, r.max_skipped_steps)]
    if r.checkpoint_on_interrupt:
        callbacks.append(GracefulInterrupt(last))
    return callbacks
