"""What a run read is said: the data section's figures (files, rows, tokens, the split, rows cut at seq_len,
rows or files a cap left out, label counts), and a warning when more than 10% of the rows are cut."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from runner.data.classification import TextClassificationDataModule
from runner.data.text import TextDataModule
from runner.telemetry.report import format_summary


def test_rows_cut_at_seq_len_and_left_out_by_caps_are_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = [{"text": ("long " * 40 if i % 4 == 0 else "short text") + f" {i}", "label": "ab"[i % 2]}
            for i in range(120)]
    rows += [{"text": "tiny", "label": "a"}] * 5  # shorter than data.min_len
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dm = TextClassificationDataModule(path=str(path), num_classes=2, seq_len=32, min_len=8, batch_size=4,
                                      max_examples=123)
    with caplog.at_level(logging.WARNING, logger="runner.data"):
        dm.setup()
    figures = dm.figures()
    assert figures["data/rows"] == 123 and figures["data/files"] == 1
    assert figures["data/truncated_rows"] == 30 and figures["data/truncated_pct"] == 25.0  # 30 of the 120 rows used
    assert figures["data/dropped_rows"] == 2 + 3
    assert figures["data/dropped_by"] == "data.max_examples=123: 2; data.min_len=8: 3"
    assert figures["data/label_counts"] == {"a": 60, "b": 60}
    assert figures["data/train_sequences"] + figures["data/val_sequences"] == 120
    assert "seeded split by row" in figures["data/split"]
    assert "30 of 120 rows (25%) are longer than data.seq_len=32 tokens" in caplog.text
    assert "Raise data.seq_len" in caplog.text
    shown = format_summary(figures)
    assert "rows cut at seq_len" in shown and "a 60, b 60" in shown


def test_a_corpus_cut_by_max_bytes_says_how_many_files_it_left_out(tmp_path: Path) -> None:
    for i in range(10):
        (tmp_path / f"doc{i}.txt").write_text(f"document {i} " * 200)  # about 2.4 kB each
    dm = TextDataModule(path=str(tmp_path), seq_len=32, batch_size=4, max_bytes=5_000)
    dm.setup()
    figures = dm.figures()
    assert figures["data/files"] == 3 and figures["data/rows"] == 3  # the file that crosses the cap is read whole
    assert figures["data/dropped_by"] == "data.max_bytes=5000: 7"
    assert figures["data/tokens"] == sum((tmp_path / f"doc{i}.txt").stat().st_size for i in range(3))
    assert "data/truncated_rows" not in figures  # packed windows cut nothing


def _with_nulls(path: Path, n: int = 200, every: int = 10) -> Path:
    """A Parquet table whose ``text`` is null in one row of ``every`` (``n // every`` of them)."""
    import pandas as pd

    texts = [None if i % every == 3 else f"row {i} says something long enough" for i in range(n)]
    pd.DataFrame({"text": texts, "label": ["ab"[i % 2] for i in range(n)]}).to_parquet(path)
    return path


def test_null_texts_are_left_out_and_counted_under_their_own_reason(tmp_path: Path) -> None:
    """A null text is neither an empty document (the causal LM) nor a row too short for data.min_len (the
    classifier): it is left out, and said as what it is."""

    path = _with_nulls(tmp_path / "rows.parquet")
    classifier = TextClassificationDataModule(path=str(path), num_classes=2, seq_len=64, min_len=16, batch_size=4)
    classifier.setup()
    figures = classifier.figures()
    assert figures["data/null_rows"] == 20 and figures["data/dropped_by"] == "null text: 20"  # not data.min_len
    assert figures["data/train_sequences"] + figures["data/val_sequences"] == 180
    lm = TextDataModule(path=str(path), seq_len=8, batch_size=2, batching="documents", min_len=2)
    lm.setup()
    figures = lm.figures()
    assert figures["data/null_rows"] == 20 and figures["data/rows"] == 180
    assert "null text: 20" in figures["data/dropped_by"]
    shown = format_summary(figures)
    assert "null texts" in shown and "null text: 20" in shown
    packed = TextDataModule(path=str(path), seq_len=8, batch_size=2)
    packed.setup()
    joined = bytes(packed._train.stream.tokens[0:len(packed._train.stream.tokens)]).decode()  # type: ignore[union-attr]
    assert "\n\n\n\n" not in joined  # no empty document between two separators
