"""A resumed run keeps the CSV rows of the run it resumes.

Lightning's CSV writer (2.6) deletes ``metrics.csv`` when its directory already holds files ("Previous
log files in this directory will be deleted"), so resuming in the same run dir would lose every row
logged before the interruption. ``CsvHistory`` moves the old file aside before the logger starts
and, once the resumed run's loggers are flushed, writes one ``metrics.csv``: the old rows up to the
step the checkpoint was taken at, then the new rows (header = union of both).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger, Logger

_STASH_SUFFIX = ".before-resume"


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    if not path.exists():
        return [], []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


class CsvHistory(Callback):
    """Stashes each CSV logger's ``metrics.csv`` on resume and merges it back (module docstring)."""

    def __init__(self, loggers: list[Logger]) -> None:
        self.files = [Path(lg.log_dir) / "metrics.csv" for lg in loggers if isinstance(lg, CSVLogger)]
        self.start_step: int | None = None
        """The global step training (re)started at, i.e. the restored checkpoint's."""
        self._stashed: list[tuple[Path, Path]] = []

    def stash(self) -> None:
        """Move existing metrics files aside (call before the loggers write anything)."""
        for path in self.files:
            if path.exists():
                old = path.with_name(path.name + _STASH_SUFFIX)
                os.replace(path, old)
                self._stashed.append((path, old))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start_step = trainer.global_step

    def restore(self) -> None:
        """Write old rows (steps before the restored one) followed by the new rows."""
        for path, old in self._stashed:
            old_keys, old_rows = _read(old)
            new_keys, new_rows = _read(path)
            if self.start_step is not None:
                old_rows = [r for r in old_rows if not r.get("step") or int(r["step"]) < self.start_step]
            keys = sorted(set(old_keys) | set(new_keys))
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=keys)
                writer.writeheader()
                writer.writerows(_complete(old_rows + new_rows, keys))
            os.replace(tmp, path)
            old.unlink()
        self._stashed = []


def _complete(rows: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    return [{k: row.get(k, "") for k in keys} for row in rows]
