"""What the run read, said where its results are: the data section of the summary, ``labels.json``, the data's
fingerprint and an instruction run's ``prompt.json``.

``DataReport`` is a Lightning callback. Once the data module has set up (``on_fit_start``), rank 0 writes
``<run_dir>/labels.json``, ``{"label2id": {label: id}, "id2label": {id: label}}``, when the data has labels
(``TextClassificationDataModule.labels``): what a trained classifier's ids mean, for whoever exports or serves it;
and ``<run_dir>/data_fingerprint.json``, the files and tokenizer the run reads, which a resume compares with the
data it would read (a resumed fit that was allowed to train on changed data says what changed: ``data/changed``); and
``<run_dir>/prompt.json`` when the data is instruction data (``InstructDataModule.prompt_format``): the prompt
template or chat template and the EOS, so that ``runner generate`` asks the model the way it was trained.
Its ``figures()`` are the data module's (``data/*``: files, rows, tokens, the split, what was cut or left out),
which ``runner.run`` collects into ``report.json``, ``report.md`` and the printed summary.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import lightning as L

from runner.atomic_files import atomic_write_bytes
from runner.data.fingerprint import FILE, changes, read_fingerprint
from runner.figures.data import DATA_CHANGED

log = logging.getLogger(__name__)

LABELS_FILE = "labels.json"
PROMPT_FILE = "prompt.json"


class DataReport(L.Callback):
    """Writes ``labels.json`` and the data's fingerprint into ``run_dir`` at the start of the fit (module
    docstring). ``fingerprint``: what the run reads (:mod:`runner.data.fingerprint`); ``resuming``: whether the fit
    continues a checkpoint, whose run recorded the data it was trained on."""

    def __init__(self, run_dir: Path, fingerprint: dict[str, Any] | None = None, resuming: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.datamodule: Any = None
        self.fingerprint, self.resuming = fingerprint, resuming
        self.changed: str | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.datamodule = getattr(trainer, "datamodule", None)
        labels = getattr(self.datamodule, "labels", None)
        as_json = getattr(labels, "as_json", None)
        if trainer.is_global_zero and callable(as_json):
            write_labels(self.run_dir, as_json())
        if trainer.is_global_zero and self.fingerprint is not None:
            self._record(self.fingerprint)
        prompt = getattr(self.datamodule, "prompt_format", None)
        if trainer.is_global_zero and isinstance(prompt, dict):
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
            out[DATA_CHANGED] = self.changed
        return out


def write_labels(run_dir: Path, labels: dict[str, Any]) -> Path:
    """``labels.json`` in ``run_dir``, written whole or not at all."""
    return write_json(Path(run_dir) / LABELS_FILE, labels)


def write_json(path: Path, value: dict[str, Any]) -> Path:
    """``value`` as JSON at ``path``, written whole or not at all."""
    atomic_write_bytes((json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode(), path)
    return path


def read_prompt(run_dir: Path) -> dict[str, Any] | None:
    """What instruction data wrote as ``prompt.json`` into ``run_dir`` (None: the run's data was not that)."""
    path = Path(run_dir) / PROMPT_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def read_labels(run_dir: Path) -> dict[str, Any]:
    """What :func:`write_labels` wrote into ``run_dir`` (``{}`` where the run's data had no labels)."""
    path = Path(run_dir) / LABELS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}
