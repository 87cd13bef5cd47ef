"""A run resumed in place keeps the metric history its checkpoint covers, across any number of kills.

The checkpoint records how many CSV rows and event-file bytes were on disk; a resume keeps those and the rows
below its step, and drops the rest once. Every write is a rename or an append, and the cut is idempotent."""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger

from runner import lightning_internals as li
from runner.figures.run import RUN_RESUMED_AT_STEP
from runner.reliability.checkpoint_io import is_local
from runner.reliability.durable_csv import DurableCsvWriter, KeepRow, Row, row_step
from runner.reliability.tb_events import cut_events, event_files, logged_tags

log = logging.getLogger(__name__)

STATE_KEY = "runner/log_history"  # Where a checkpoint records what of the logs was on disk when it was written.


def attach_durable_writer(logger: CSVLogger, resuming: bool) -> DurableCsvWriter:
    """Make ``logger`` write through a :class:`DurableCsvWriter` (before anything has logged to it)."""
    writer = DurableCsvWriter(logger.log_dir, resuming)
    # On ranks other than 0 Lightning's rank-zero decorator still returns its dummy experiment.
    li.set_logger_experiment(logger, writer)
    return writer


class LogHistory(Callback):
    """Keeps the CSV and TensorBoard history a checkpoint covers. Build it before any logger has written (its CSV
    writers replace Lightning's); ``resuming``: the old files are cut once training starts."""

    def __init__(self, loggers: list[Logger], resuming: bool) -> None:
        self.resuming = resuming
        self.csv = [attach_durable_writer(lg, resuming) for lg in loggers
                    if isinstance(lg, CSVLogger) and is_local(lg.log_dir)]
        self.tensorboard = [lg for lg in loggers if isinstance(lg, TensorBoardLogger) and is_local(lg.log_dir)]
        # The event files already there: this process's own file, created later, is never cut.
        self._earlier = [event_files(lg.log_dir) for lg in self.tensorboard]
        self._saved: dict[str, Any] = {}
        self._cut = False
        self.resumed_at: int | None = None  # The step the run resumed from (None: it started at step 0).
        self._validated = False  # since the resume

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if not trainer.is_global_zero:
            return
        for writer in self.csv:
            writer.save()  # the rows logged so far reach the disk before the checkpoint does
        tb_bytes = []
        for lg in self.tensorboard:
            lg.experiment.flush()
            tb_bytes.append({p.name: p.stat().st_size for p in event_files(lg.log_dir)})
        checkpoint[STATE_KEY] = {"csv_rows": [w.rows_in_file for w in self.csv], "tb_bytes": tb_bytes}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._saved = dict(checkpoint.get(STATE_KEY) or {})

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.resuming and trainer.global_step > 0:
            self.resumed_at = trainer.global_step
        if self.resuming and not self._cut and trainer.is_global_zero:
            self.cut(trainer.global_step)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validated = True

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """A resumed run's last step validates when nothing has since the resume (module docstring)."""
        if self.resumed_at is not None and not self._validated and 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True  # Lightning validates at the step a fit is asked to stop at (every rank's)

    def figures(self) -> dict[str, Any]:
        return {RUN_RESUMED_AT_STEP: self.resumed_at} if self.resumed_at is not None else {}

    def cut(self, step: int) -> None:
        """Drop what was logged past the checkpoint the run resumed from (``step`` = its global step)."""
        self._cut = True
        csv_rows: list[int] = self._saved.get("csv_rows", [])
        for i, writer in enumerate(self.csv):
            covered = csv_rows[i] if i < len(csv_rows) else 0
            kept, dropped = writer.resume(_keep_rows(covered, step))
            log.info("resumed at step %d: %s keeps %d rows, drops %d logged past the checkpoint",
                     step, writer.path, kept, dropped)
        tb_bytes: list[dict[str, int]] = self._saved.get("tb_bytes", [])
        for i, (lg, earlier) in enumerate(zip(self.tensorboard, self._earlier, strict=True)):
            sizes = tb_bytes[i] if i < len(tb_bytes) else {}
            lg.experiment.flush()  # what this process logged before training (hyperparameters) is on disk
            relogged: set[tuple[str, int]] = set()
            for path in set(event_files(lg.log_dir)) - set(earlier):
                relogged |= logged_tags(path)
            for path in earlier:
                if path.exists():
                    cut_events(path, sizes.get(path.name, 0), step, relogged)

    def close(self) -> None:
        """After fit: a resumed run that never reached training writes its held rows, dropping nothing."""
        for writer in self.csv:
            writer.release()


def _keep_rows(covered: int, step: int) -> KeepRow:
    """Rows on disk when the checkpoint was written (the first ``covered``), then rows before ``step``."""

    def keep(index: int, row: Row) -> bool:
        s = row_step(row)
        return index < covered or s is None or s < step

    return keep
