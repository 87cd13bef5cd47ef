"""Every format ``data.path`` takes trains (a few eager steps each): text files, .jsonl, .csv, .parquet and
``save_to_disk`` folders, for the causal LM (a table's text column, never its raw bytes) and the classifier (its
text and label columns); token ids are tokenized once and read back from the cache; a corpus stays memory-mapped;
labelled rows held in memory are what ``datasets.Dataset.from_dict`` makes."""

from __future__ import annotations

import json
import logging
import math
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runner.data.classification import TextClassificationDataModule
from runner.data.text import TextDataModule
from tests.family_fits import classifier_module, fit
from tests.helpers import tiny_module
from tests.hf_models import save_tokenizer

LABELS = ("bad", "fine", "good", "great")


def words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choices("abcdefgh", k=rng.randint(2, 7))) for _ in range(n))


def rows(n: int = 240) -> list[dict[str, Any]]:
    rng = random.Random(0)
    return [{"review": words(rng, rng.randint(4, 30)), "stars": LABELS[i % 4], "id": i} for i in range(n)]


def write(root: Path, fmt: str, table: list[dict[str, Any]]) -> Path:
    """``table`` in ``fmt``: the path to give ``data.path``."""
    import datasets
    import pandas as pd

    root.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(table)
    if fmt == "jsonl":
        (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table))
    elif fmt == "csv":
        frame.to_csv(root / "rows.csv", index=False)
    elif fmt == "parquet":
        frame.to_parquet(root / "rows.parquet")
    elif fmt == "saved":
        datasets.Dataset.from_pandas(frame).save_to_disk(str(root / "saved"))
        return root / "saved"
    elif fmt == "tsv":  # label<TAB>text lines
        (root / "rows.tsv").write_text("".join(f"{r['stars']}\t{r['review']}\n" for r in table))
    elif fmt == "txt":  # one text file per row
        for r in table:
            (root / f"{r['id']:04d}.txt").write_text(r["review"] + "\n")
        return root
    return next(root.iterdir())


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "csv", "parquet", "saved"])
def test_a_causal_lm_trains_on_each_format(fmt: str, tmp_path: Path) -> None:
    path = write(tmp_path / fmt, fmt, rows())
    data = TextDataModule(path=str(path), text_column="review", seq_len=32, batch_size=4)
    result = fit(tiny_module(), data, steps=3)
    assert len(result.losses) == 3 and all(math.isfinite(x) for x in result.losses)
    seen = np.concatenate([data._train[i][0].numpy() for i in range(len(data._train))])  # type: ignore[arg-type]
    assert set(seen.tolist()) <= set(b"abcdefgh \n")  # the rows' text: no JSON, no CSV header, no column of ids


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "saved", "tsv"])
def test_a_classifier_trains_on_each_format(fmt: str, tmp_path: Path) -> None:
    table = rows()
    if fmt == "saved":  # class ids instead of names
        table = [{**r, "stars": LABELS.index(r["stars"])} for r in table]
    path = write(tmp_path / fmt, fmt, table)
    columns = {} if fmt == "tsv" else {"text_column": "review", "label_column": "stars"}
    data = TextClassificationDataModule(path=str(path), num_classes=4, seq_len=48, min_len=4, batch_size=8,
                                        **columns)
    result = fit(classifier_module(), data, steps=3)
    assert len(result.losses) == 3 and all(math.isfinite(x) for x in result.losses)
    assert data.labels is not None
    expected = {"0": 0, "1": 1, "2": 2, "3": 3} if fmt == "saved" else {name: i for i, name in enumerate(LABELS)}
    assert data.labels.label2id == expected
    by_text = {r["review"][:48]: r["stars"] for r in table}
    for i in range(8):  # each row keeps its own label (ids are bytes shifted by one)
        ids, label = data._train[i]  # type: ignore[index]
        assert by_text[bytes((ids - 1).tolist()).decode()] in (label, LABELS[label])


def test_a_second_run_reads_the_token_ids_from_the_cache(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path / "jsonl", "jsonl", rows())
    tokenizer = tmp_path / "tokenizer"
    save_tokenizer(tokenizer)

    def setup() -> TextDataModule:
        dm = TextDataModule(path=str(path), tokenizer=str(tokenizer), text_column="review", seq_len=16, batch_size=2)
        dm.setup()
        return dm

    with caplog.at_level(logging.INFO, logger="runner.data"):
        first = setup()
    assert "tokenized 240 rows" in caplog.text and "prepared 240 rows" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="runner.data"):
        second = setup()
    assert "tokenized 240 rows" not in caplog.text and "not tokenized again" in caplog.text, caplog.text
    assert "read from the cache" in caplog.text
    a, b = first._train[0], second._train[0]  # type: ignore[index]
    assert all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a, b, strict=True))


def test_a_corpus_stays_memory_mapped(tmp_path: Path) -> None:
    """The ids are read from the memory-mapped store: the training set pickles (for a loader's workers) as file
    names, not as the corpus, and its ids are views of the file, not copies."""
    rng = random.Random(1)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(words(rng, 40) for _ in range(30_000)))  # about 5 MB
    data = TextDataModule(path=str(corpus), seq_len=64, max_bytes=None)
    data.setup()
    assert len(pickle.dumps(data._train)) < 50_000 < corpus.stat().st_size
    tokens = data._train.stream.tokens  # type: ignore[union-attr]
    view = tokens[10:20]
    assert isinstance(tokens.array, np.memmap) and not view.flags.owndata and not view.flags.writeable


def test_a_glob_and_a_folder_of_tables_read_every_file(tmp_path: Path) -> None:
    table = rows()
    for i in range(3):
        write(tmp_path / "parts", "csv", table[i * 80:(i + 1) * 80])
        (tmp_path / "parts" / "rows.csv").rename(tmp_path / "parts" / f"part{i}.csv")
    (tmp_path / "parts" / "README.md").write_text("not a table\n")
    for path in (tmp_path / "parts", tmp_path / "parts" / "*.csv"):
        data = TextClassificationDataModule(path=str(path), text_column="review", label_column="stars", num_classes=4,
                                            min_len=1, max_examples=None)
        data.setup()
        assert len(data._train) + len(data._val) == 240  # type: ignore[arg-type]


def test_a_long_text_is_tokenized_in_segments_as_a_whole(tmp_path: Path) -> None:
    """A piece of a text file (megabytes) is tokenized 64 K characters at a time, cut after a newline, the special
    tokens once: the same ids as the whole text at once, in a fraction of the tokenizer's memory."""
    from runner.data.tokens.encoding import SEGMENT, tokenize_long
    from runner.data.tokens.tokenizers import SavedTokenizer

    save_tokenizer(tmp_path / "tokenizer")
    tokenizer = SavedTokenizer(str(tmp_path / "tokenizer"))
    rng = random.Random(2)
    text = "\n".join(words(rng, 12) for _ in range(4000))
    assert len(text) > 3 * SEGMENT
    assert np.array_equal(tokenize_long(tokenizer, text), tokenizer([text])[0])


def test_rows_held_in_memory_are_what_from_dict_makes_with_a_fingerprint_of_their_values() -> None:
    """Labelled rows held in memory (the stdlib task, label<TAB>text lines) are named by runner, not by dill's pickle
    of their Arrow table (which fails beside a pyarrow outside site-packages: tests/test_install.py runs that)."""
    import datasets

    from runner.data.reading.tables import in_memory_rows

    columns = {"text": ["a cat", "", "é\tb"], "label": ["x", "y", "x"]}
    rows, expected = in_memory_rows(columns), datasets.Dataset.from_dict(columns)
    assert rows.features == expected.features and rows.data.table.equals(expected.data.table)
    assert rows.to_dict() == columns and rows.cache_files == []
    # The name datasets keeps it under (no public accessor): the same for the same values, another for others.
    assert rows._fingerprint == in_memory_rows(dict(columns))._fingerprint
    assert rows._fingerprint != in_memory_rows({**columns, "label": ["x", "y", "y"]})._fingerprint
