"""The metric-history pieces on their own, on real files: ``DurableCsvWriter`` behind Lightning's real
``CSVLogger``, and TensorBoard event files written by the real ``SummaryWriter`` and cut by
``cut_events``. Faults are injected at the system-call boundary (``os.write``, ``os.replace``), the way
a full disk or a kill would hit them. The real-process SIGKILL test is tests/test_reliability_sigkill.py."""

from __future__ import annotations

import csv
import errno
import os
import warnings
from pathlib import Path

import pytest
from lightning.pytorch.loggers import CSVLogger

from runner.atomic_files import DiskFullError
from runner.reliability.log_history import (
    DurableCsvWriter,
    attach_durable_writer,
    cut_events,
    logged_tags,
    read_rows,
    records,
)


def _logger(tmp_path: Path, resuming: bool) -> tuple[CSVLogger, DurableCsvWriter]:
    lg = CSVLogger(save_dir=tmp_path, name="csv", version="")
    writer = attach_durable_writer(lg, resuming)
    assert lg.experiment is writer  # pins lightning_internals.set_logger_experiment on this Lightning
    return lg, writer


def _steps(path: Path, key: str = "loss") -> list[int]:
    with open(path, newline="") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get(key)]


def test_resume_keeps_covered_rows_drops_the_rest_and_a_torn_row(tmp_path: Path) -> None:
    lg, _ = _logger(tmp_path, resuming=False)
    for step in range(4):
        lg.log_metrics({"loss": float(step)}, step=step)
    lg.log_metrics({"tele": 1.0}, step=4)  # logged under the step count once step 3 ended
    lg.save()  # checkpoint 4 is written now, with these 5 rows on disk
    for step in (4, 5):
        lg.log_metrics({"loss": float(step)}, step=step)
        lg.save()
    path = Path(lg.log_dir) / "metrics.csv"
    with open(path, "ab") as f:
        f.write(b"0.5,7")  # a row a kill cut short: no newline
    assert [int(r["step"]) for r in read_rows(path)[1]] == [0, 1, 2, 3, 4, 4, 5]
    on_disk = path.read_bytes()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Lightning's "Previous log files ... will be deleted" would raise here
        lg2, writer = _logger(tmp_path, resuming=True)
        lg2.log_hyperparams({"lr": 0.1})
        lg2.log_metrics({"loss": 40.0}, step=4)  # held until the cut is decided
        lg2.save()
        assert path.read_bytes() == on_disk
        kept, dropped = writer.resume(lambda i, row: i < 5 or int(row["step"]) < 4)
    assert (kept, dropped) == (5, 2)
    assert path.read_bytes().endswith(b"\n") and writer.rows_in_file == 6
    keys, rows = read_rows(path)
    assert [(r["step"], r["loss"] or r["tele"]) for r in rows] == [
        ("0", "0.0"), ("1", "1.0"), ("2", "2.0"), ("3", "3.0"), ("4", "1.0"), ("4", "40.0")]
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def test_full_disk_mid_append_keeps_whole_rows_and_the_rows_to_write(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    lg, writer = _logger(tmp_path, resuming=False)
    lg.log_metrics({"loss": 0.0}, step=0)
    lg.save()
    path = writer.path
    before = path.read_bytes()
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    lg.log_metrics({"loss": 1.0}, step=1)
    with pytest.raises(DiskFullError, match="ckpt_path=last"):
        lg.save()
    assert path.read_bytes() == before  # the half row was cut off again
    monkeypatch.setattr(os, "write", real_write)  # space freed
    lg.save()
    assert _steps(path) == [0, 1]


def test_full_disk_during_a_header_rewrite_leaves_the_old_file_and_header(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    lg, writer = _logger(tmp_path, resuming=False)
    lg.log_metrics({"loss": 0.0}, step=0)
    lg.save()
    before = writer.path.read_bytes()
    real_replace = os.replace

    def full(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    lg.log_metrics({"loss": 1.0, "val": 2.0}, step=1)  # a new key: the whole file is rewritten
    with pytest.raises(DiskFullError):
        lg.save()
    assert writer.path.read_bytes() == before and writer.metrics_keys == ["loss", "step"]
    monkeypatch.setattr(os, "replace", real_replace)
    lg.log_metrics({"loss": 2.0}, step=2)
    lg.save()  # the header on disk gains "val" before any wider row is appended
    keys, rows = read_rows(writer.path)
    assert keys == ["loss", "step", "val"] and [r["step"] for r in rows] == ["0", "1", "2"]


def test_a_fresh_run_replaces_an_old_file_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lg, _ = _logger(tmp_path, resuming=False)
    lg.log_metrics({"loss": 0.0}, step=0)
    lg.save()
    lg2, _ = _logger(tmp_path, resuming=False)
    assert _steps(Path(lg2.log_dir) / "metrics.csv") == [0]  # nothing is deleted before the first save
    lg2.log_metrics({"loss": 9.0}, step=0)
    lg2.save()
    assert "ckpt_path=last" in caplog.text
    with open(Path(lg2.log_dir) / "metrics.csv", newline="") as f:
        assert [r["loss"] for r in csv.DictReader(f)] == ["9.0"]


def _events(tmp_path: Path) -> tuple[Path, int]:
    """An event file with scalars at steps 0-9; returns it and its size after step 4 was flushed."""
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    for step in range(10):
        w.add_scalar("loss", float(step), step)
        if step == 4:
            w.flush()
            at_checkpoint = next(tmp_path.glob("events.out.tfevents.*")).stat().st_size
    w.add_scalar("tele", 1.0, 5)  # logged out of order: after the checkpoint, so not covered
    w.close()
    return next(tmp_path.glob("events.out.tfevents.*")), at_checkpoint


def test_event_file_cut_back_to_a_checkpoint_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    path, at_checkpoint = _events(tmp_path)
    with open(path, "ab") as f:
        f.write(b"\x10\x00\x00")  # a record a kill cut short
    assert cut_events(path, at_checkpoint, before_step=3, relogged={("loss", 0)}) == (4, 7)
    assert sorted(logged_tags(path)) == [("loss", 1), ("loss", 2), ("loss", 3), ("loss", 4)]
    once = path.read_bytes()
    assert cut_events(path, at_checkpoint, before_step=3, relogged={("loss", 0)}) == (4, 0)
    assert path.read_bytes() == once
    assert sum(1 for _ in records(once)) == 5  # the version header and four scalars


def test_event_file_left_with_nothing_is_removed(tmp_path: Path) -> None:
    path, _ = _events(tmp_path)
    cut_events(path, keep_bytes=0, before_step=0)
    assert not path.exists()
