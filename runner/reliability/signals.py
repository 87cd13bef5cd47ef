"""SIGINT and SIGTERM stop a run cleanly: finish the step, checkpoint, flush loggers, exit 128+signum.

A checkpoint taken in ``on_exception`` after Lightning's own SIGTERM stop is not always resumable exactly (its
batch counter can be one ahead), so the first signal is only recorded; ``last.ckpt`` is written at the next
``on_train_batch_end`` and only then does Lightning's handler stop the loops. A second signal before the save
raises ``KeyboardInterrupt``."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, WandbLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException

from runner import lightning_internals as li
from runner.reliability.numerics import agreed_flag, check_every_for

log = logging.getLogger(__name__)


def exit_code(signum: int) -> int:
    """The shell's convention for a process stopped by a signal: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum)


class GracefulInterrupt(Callback):
    """Checkpoint on SIGINT/SIGTERM at a step boundary (see the module docstring)."""

    def __init__(self, ckpt_path: Path, check_every: int | None = None) -> None:
        """``check_every``: optimizer steps between the ranks' agreements (None: see the module docstring)."""
        self.ckpt_path = ckpt_path
        self.check_every = check_every
        self._every = check_every or 1
        self._agreed_at: int | None = None
        self.signum: int | None = None  # The first interrupting signal received, if any.
        self.step: int | None = None  # The global step the interrupt checkpoint was written at.
        # A signal that arrived after the last training step (it stopped nothing), if any.
        self.after_end: int | None = None
        self._lightning_sigterm: Any = None
        self._saving = False
        self._ended = False

    @property
    def interrupted(self) -> bool:
        return self.signum is not None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._every = self.check_every or check_every_for(trainer.strategy.root_device,
                                                          getattr(trainer, "log_every_n_steps", 50))
        # Lightning registers its SIGTERM handler after on_fit_start, just before the loops run.
        self._lightning_sigterm = signal.getsignal(signal.SIGTERM)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.step is not None or self._saving:
            # Saving, or saved and Lightning told: its loops stop. Under several ranks, Lightning's handler on
            # rank 0 forwards SIGTERM to the other ranks while they save: that one is expected, not a second.
            return
        if self._ended:
            self._too_late(signum)
            return
        if self.signum is not None:
            raise KeyboardInterrupt  # a second signal: stop now, without the checkpoint
        self.signum = signum
        log.warning("received %s: finishing the current step, then saving a checkpoint", signal.Signals(signum).name)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.step is not None:
            return
        if trainer.world_size > 1:
            step = trainer.global_step
            if self._every > 1 and (step % self._every or step == self._agreed_at):
                return  # not an agreement step: every rank skips it alike
            self._agreed_at = step
            # A signal may reach one rank only, or the ranks on either side of a step boundary: they agree
            # here, so every rank saves its part of the checkpoint at the same step (a sharded checkpoint
            # is written by all of them; a rank left behind would wait in the next collective forever).
            # On the strategy's device: NCCL reduces CUDA tensors only.
            flag = torch.tensor([self.signum or 0], device=trainer.strategy.root_device)
            agreed = agreed_flag(trainer, flag)
            self.signum = agreed or None
        if self.signum is None:
            return
        self._saving = True
        trainer.save_checkpoint(self.ckpt_path)
        self.step = trainer.global_step
        log.warning("interrupted at step %d: checkpoint saved to %s", trainer.global_step, self.ckpt_path)
        # Lightning's handler sets trainer.received_sigterm (and tells DDP ranks); its loops stop next.
        if callable(self._lightning_sigterm):
            self._lightning_sigterm(signal.SIGTERM, None)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # No step boundary is left to stop at: a signal recorded after the last one (or between the ranks'
        # agreements near the end) stopped nothing, and the run ends as it would have.
        self._ended = True
        if self.signum is not None and self.step is None:
            self._too_late(self.signum)
            self.signum = None

    def _too_late(self, signum: int) -> None:
        self.after_end = signum
        log.warning("received %s after the last training step: the run had finished training and ends as it would "
                    "have (nothing to resume)", signal.Signals(signum).name)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and self.signum is None:
            self.signum = int(signal.SIGTERM)  # Lightning's own handler caught it (before on_train_start)

    def figures(self) -> dict[str, Any]:
        late = {} if self.after_end is None else {"run/signal_after_end": signal.Signals(self.after_end).name}
        if self.signum is None:
            return late
        return {**late, "run/interrupted_by": signal.Signals(self.signum).name, "run/interrupted_at_step": self.step}


def flush_loggers(loggers: list[Logger], status: str) -> None:
    """Finalize every logger (CSV writes its buffered rows) and close wandb's run, whose offline
    files are otherwise completed only at interpreter exit (``WandbLogger.finalize`` does not
    finish the run). Each logger is closed even if another one fails."""
    for lg in loggers:
        try:
            lg.finalize(status)
            run = li.started_wandb_run(lg) if isinstance(lg, WandbLogger) else None
            if run is not None:
                run.finish(exit_code=0 if status == "success" else 1)
        except Exception:  # closing one logger must not lose the others' data
            log.exception("closing logger %s failed", type(lg).__name__)
