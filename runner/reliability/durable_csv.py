"""``metrics.csv`` that a SIGKILL at any instant leaves readable, holding every whole row written so far.

Lightning's CSV writer (2.6) rewrites the whole file in place when a key appears and deletes it on start; this one
appends with ``os.write`` on ``O_APPEND`` and renames whole new files over the old one."""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from runner.reliability.checkpoint_io import atomic_write_bytes, raise_if_disk_full

log = logging.getLogger(__name__)

Row = dict[str, str]
# Decides, on resume, whether the file's row number ``i`` (0-based, header excluded) stays.
KeepRow = Callable[[int, Row], bool]


def read_rows(path: Path) -> tuple[list[str], list[Row]]:
    """The header and the whole rows of a metrics file; an unterminated last line (a write cut short
    by a kill) is not a row. A missing file has neither."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], []
    whole = data[: data.rfind(b"\n") + 1].decode()
    reader = csv.DictReader(io.StringIO(whole, newline=""))
    return list(reader.fieldnames or []), list(reader)


def row_step(row: Row) -> int | None:
    """The row's ``step`` column as an int, or None when it has none."""
    try:
        return int(float(row.get("step") or ""))
    except ValueError:
        return None


def _encode(keys: list[str], rows: list[dict[str, Any]], header: bool) -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=keys, restval="")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue().encode()


class DurableCsvWriter(ExperimentWriter):
    """Lightning's CSV ``ExperimentWriter`` whose file survives a SIGKILL at any instant. ``resuming``: hold every row
    until :meth:`resume` (or :meth:`release`) says which old rows stay."""

    def __init__(self, log_dir: str, resuming: bool) -> None:
        # Lightning's __init__ is not called on purpose: it deletes an existing metrics.csv.
        self.log_dir = log_dir
        self.metrics: list[dict[str, Any]] = []
        self.metrics_keys: list[str] = []
        self.hparams: dict[str, Any] = {}
        self.metrics_file_path = os.path.join(log_dir, self.NAME_METRICS_FILE)
        self._fs = get_filesystem(log_dir)
        self.rows_in_file = 0  # Whole rows in ``metrics.csv`` (this writer's view; it is the file's only writer).
        self._held = resuming
        self._fresh = not resuming

    @property
    def path(self) -> Path:
        return Path(self.metrics_file_path)

    @property
    def rows_logged(self) -> int:
        """Rows in the file plus rows logged but not yet saved: the index the next row will have."""
        return self.rows_in_file + len(self.metrics)

    def log_hparams(self, params: dict[str, Any]) -> None:
        """Record hparams and write ``hparams.yaml`` atomically."""
        self.hparams.update(params)
        target = Path(self.log_dir) / self.NAME_HPARAMS_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        save_hparams_to_yaml(tmp, self.hparams)
        os.replace(tmp, target)

    def save(self) -> None:
        """Write the rows logged since the last save (held while a resume is undecided)."""
        if not self.metrics or self._held:
            return
        new_keys = set().union(*self.metrics) - set(self.metrics_keys)
        if self._fresh or new_keys:
            old: list[Row] = []
            if not self._fresh:
                _, old = read_rows(self.path)
            elif self.path.exists():
                log.warning("%s is replaced: this run did not resume (add ckpt_path=last to continue that run "
                            "and keep its rows)", self.path)
            self._replace(old + self.metrics, sorted(set(self.metrics_keys) | new_keys))
            self._fresh = False
        else:
            self._append(self.metrics)
        self.metrics = []

    def resume(self, keep: KeepRow) -> tuple[int, int]:
        """Keep the file's rows for which ``keep(index, row)`` is true (one atomic rewrite), then write
        the held rows after them. Returns (rows kept, rows dropped)."""
        keys, rows = read_rows(self.path)
        kept = [row for i, row in enumerate(rows) if keep(i, row)]
        if len(kept) != len(rows) or self._has_partial_tail():
            self._replace(kept, keys)
        self.metrics_keys, self.rows_in_file = keys, len(kept)
        self._held = False
        self.save()
        return len(kept), len(rows) - len(kept)

    def release(self) -> None:
        """Stop holding without dropping any old row (the resume point was never known)."""
        if self._held:
            self.resume(lambda i, row: True)

    def _has_partial_tail(self) -> bool:
        try:
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                return f.read(1) != b"\n"
        except OSError:  # missing or empty file
            return False

    def _replace(self, rows: list[Row] | list[dict[str, Any]], keys: list[str]) -> None:
        # The header in memory changes only once the file holding it is in place: a failed rewrite
        # (a full disk) must not make the next save append rows wider than the header on disk.
        atomic_write_bytes(_encode(keys, list(rows), header=True), self.path)
        self.metrics_keys, self.rows_in_file = keys, len(rows)

    def _append(self, rows: list[dict[str, Any]]) -> None:
        data = memoryview(_encode(self.metrics_keys, rows, header=False))
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:  # removed behind the writer's back: start it again, with a header
            log.warning("%s disappeared during the run: writing it again from the rows logged now", self.path)
            self._replace(rows, self.metrics_keys)
            return
        try:
            size = os.fstat(fd).st_size
            try:
                while data:
                    data = data[os.write(fd, data):]
            except OSError as e:
                # A full disk: leave the file as it was (whole rows only), then fail loudly.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise_if_disk_full(e, self.path, "it keeps its whole rows, the rows not written are still held")
                raise
        finally:
            os.close(fd)
        self.rows_in_file += len(rows)
