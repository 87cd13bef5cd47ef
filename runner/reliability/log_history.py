"""A run resumed in place keeps the metric history its checkpoint covers, across any number of kills.

The checkpoint records how many CSV rows and event-file bytes were on disk; a resume keeps those and the rows
below its step, and drops the rest once. ``metrics.csv`` is written by ``DurableCsvWriter`` (appends on
``O_APPEND``, whole files renamed into place: Lightning's 2.6 writer rewrites the file in place when a key appears),
TensorBoard event files are cut record by record (``cut_events``); every write is a rename or an append, and the
cut is idempotent."""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from runner import lightning_internals as li
from runner.atomic_files import atomic_write_bytes, raise_if_disk_full, remove_stale_temps
from runner.reliability.checkpoint_io import is_local

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

    def log_hparams(self, params: dict[str, Any]) -> None:
        """Record hparams and write ``hparams.yaml`` atomically."""
        self.hparams.update(params)
        target = Path(self.log_dir) / self.NAME_HPARAMS_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        save_hparams_to_yaml(tmp, self.hparams)
        os.replace(tmp, target)

    def save(self) -> None:
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


_HEADER = 12  # uint64 length + uint32 masked CRC of the length
_FOOTER = 4  # uint32 masked CRC of the data


def event_files(log_dir: str | os.PathLike[str]) -> list[Path]:
    """The TensorBoard event files directly in ``log_dir``, sorted by name (i.e. by creation time)."""
    return sorted(p for p in Path(log_dir).glob("events.out.tfevents.*") if p.is_file() and not p.name.startswith("."))


def _event_class() -> Any:
    try:
        from tensorboard.compat.proto.event_pb2 import Event
    except ImportError:  # Lightning's TensorBoardLogger also runs on tensorboardX alone
        from tensorboardX.proto.event_pb2 import Event
    return Event


def records(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(start, end, serialized event) of each whole record in an event file's bytes."""
    pos = 0
    while pos + _HEADER <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        end = pos + _HEADER + length + _FOOTER
        if end > len(data):
            return  # cut short by a kill
        yield pos, end, data[pos + _HEADER: pos + _HEADER + length]
        pos = end


def logged_tags(path: Path) -> set[tuple[str, int]]:
    event = _event_class()
    out: set[tuple[str, int]] = set()
    for _, _, payload in records(path.read_bytes()):
        e = event.FromString(payload)
        out.update((v.tag, e.step) for v in e.summary.value)
    return out


def cut_events(path: Path, keep_bytes: int, before_step: int,
               relogged: set[tuple[str, int]] | frozenset[tuple[str, int]] = frozenset()) -> tuple[int, int]:
    """Cut one event file back to a checkpoint, also dropping the summaries in ``relogged`` (logged again by the
    resumed process). Returns (events kept, events dropped)."""
    event = _event_class()
    remove_stale_temps(path)  # a cut killed before its rename: TensorBoard reads any name holding "tfevents"
    data = path.read_bytes()
    kept: list[bytes] = []
    dropped = summaries = 0
    for start, end, payload in records(data):
        e = event.FromString(payload)
        header = e.WhichOneof("what") == "file_version"
        again = any((v.tag, e.step) in relogged for v in e.summary.value)
        if header or (not again and (start < keep_bytes or e.step < before_step)):
            kept.append(data[start:end])
            summaries += not header
        else:
            dropped += 1
    out = b"".join(kept)
    if summaries == 0:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    elif out != data:
        atomic_write_bytes(out, path)
    return summaries, dropped


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
        return {"run/resumed_at_step": self.resumed_at} if self.resumed_at is not None else {}

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
        try:
            return index < covered or int(float(row.get("step") or "")) < step
        except ValueError:  # a row without a step
            return True

    return keep
