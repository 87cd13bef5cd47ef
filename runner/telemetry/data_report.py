"""What the run read, written where its results are: ``labels.json``, the data's fingerprint (which a resume
compares with the data it would read), an instruction run's ``prompt.json`` and the ``data/*`` figures."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import lightning as L

from runner.atomic_files import atomic_write_bytes
from runner.data.fingerprint import FILE, changes, read_fingerprint

log = logging.getLogger(__name__)

LABELS_FILE = "labels.json"
PROMPT_FILE = "prompt.json"


class DataReport(L.Callback):
    """Writes ``labels.json``, the data's fingerprint and ``prompt.json`` into ``run_dir`` at the start of the fit."""

    def __init__(self, run_dir: Path, fingerprint: dict[str, Any] | None = None, resuming: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.datamodule: Any = None
        self.fingerprint, self.resuming = fingerprint, resuming
        self.changed: str | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.datamodule = getattr(trainer, "datamodule", None)
        if not trainer.is_global_zero:
            return
        as_json = getattr(getattr(self.datamodule, "labels", None), "as_json", None)
        if callable(as_json):
            write_json(self.run_dir / LABELS_FILE, as_json())
        if self.fingerprint is not None:
            self._record(self.fingerprint)
        if isinstance(prompt := getattr(self.datamodule, "prompt_format", None), dict):
            write_json(self.run_dir / PROMPT_FILE, prompt)

    def _record(self, now: dict[str, Any]) -> None:
        """Say what changed since the checkpoint's data (a resume allowed to train on it), then record ``now``."""
        before = read_fingerprint(self.run_dir) if self.resuming else None
        if before is not None and (found := changes(before, now)):
            self.changed = "; ".join(found)
            log.warning("data: resuming on data that changed since the checkpoint (after.allow_changed_data): %s. "
                        "The checkpoint's place in the data and the validation split are not what they were.",
                        self.changed)
        atomic_write_bytes((json.dumps(now, indent=1) + "\n").encode(), self.run_dir / FILE)

    def figures(self) -> dict[str, Any]:
        """The data module's figures (``data/*``), when it reports any, and what changed since the checkpoint."""
        report = getattr(self.datamodule, "figures", None)
        out = dict(report()) if callable(report) else {}
        if self.changed:
            out["data/changed"] = self.changed
        return out


def write_json(path: Path, value: dict[str, Any]) -> Path:
    """``value`` as JSON at ``path``, written whole or not at all."""
    atomic_write_bytes((json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode(), path)
    return path


def read_prompt(run_dir: Path) -> dict[str, Any] | None:
    """What instruction data wrote as ``prompt.json`` into ``run_dir`` (None: the run's data was not that)."""
    path = Path(run_dir) / PROMPT_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def read_labels(run_dir: Path) -> dict[str, Any]:
    """The ``labels.json`` written into ``run_dir`` (``{}`` where the run's data had no labels)."""
    path = Path(run_dir) / LABELS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}
