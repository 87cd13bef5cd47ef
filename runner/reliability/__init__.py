"""Reliability: a run that stops keeps what it did. Atomic checkpoints, SIGINT/SIGTERM at a step
boundary, non-finite losses, metric history on resume.

Where each piece plugs in (``runner.build`` / ``runner.run``):

* ``AtomicCheckpointIO``: the Trainer's checkpoint plugin, so every ``last.ckpt`` is written atomically.
* ``build_reliability_callbacks``: ``NonFiniteGuard`` (stop/skip) and ``GracefulInterrupt``
  (SIGINT/SIGTERM -> checkpoint).
* ``LogHistory``: CSV rows and TensorBoard events survive any number of kills; a resumed run keeps
  what its checkpoint covers and drops the rest once (``DurableCsvWriter``, ``cut_events``).

Elsewhere: resumable data in ``runner.data.resumable``, the compile-cache artifacts that outlive the run in
``runner.stack.caches`` (the ``reliability`` group's fields configure them), atomic files in
``runner.atomic_files``, compile-error explanation in ``runner.stack.errors.explain``, config checks in
``runner.config``, ``RunStopped`` in ``runner.errors``. Resume a stopped run in place: ``python -m runner
<same overrides> hydra.run.dir=<run dir> ckpt_path=last``, or ``python -m runner resume <run dir>``
(``runner.after.resume``), which reads the overrides back from the run.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from runner.config.paths import last_checkpoint_path
from runner.config.schema import RunConfig
from runner.reliability.checkpoint_io import AtomicCheckpointIO, atomic_torch_save
from runner.reliability.log_history import LogHistory
from runner.reliability.numerics import NonFiniteGuard, NonFiniteLossError
from runner.reliability.signals import GracefulInterrupt, exit_code, flush_loggers

__all__ = [
    "AtomicCheckpointIO",
    "GracefulInterrupt",
    "LogHistory",
    "NonFiniteGuard",
    "NonFiniteLossError",
    "atomic_torch_save",
    "build_reliability_callbacks",
    "exit_code",
    "flush_loggers",
]


def build_reliability_callbacks(cfg: RunConfig) -> list[Callback]:
    """The reliability callbacks for a run, from the ``reliability`` group."""
    r = cfg.reliability
    last = last_checkpoint_path(cfg.run_dir)
    callbacks: list[Callback] = [
        NonFiniteGuard(r.on_nonfinite, last, r.max_skipped_steps),
    ]
    if r.checkpoint_on_interrupt:
        callbacks.append(GracefulInterrupt(last))
    return callbacks
