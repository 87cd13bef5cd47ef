"""Bad data is refused before anything is written: one paragraph naming the fix, exit code 2, no run directory.
The table runs ``precheck`` in-process (what ``python -m runner`` runs before Hydra); one real process checks the
exit code and that nothing was written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.config import ConfigError
from runner.config.composing.precheck import precheck
from tests.cli import run_cli
from tests.hf_models import save_model, save_tokenizer

ROWS = [{"review": f"a review of some length, number {i}", "stars": ["bad", "good", "great"][i % 3]}
        for i in range(60)]


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _csv(path: Path) -> Path:
    import pandas as pd

    pd.DataFrame(ROWS).to_csv(path, index=False)
    return path


ONE_ID = {"review": "a review whose label is a class id", "stars": 1}
NUMBER_ROW = {"review": 5, "stars": "bad"}
MISSING_COMMA = '{"review": "a review" "stars": "bad"}'
NUMBER_TEXT = json.dumps(NUMBER_ROW)
UNTERMINATED = '{"review": "never closed'
CUT_SHORT = b'[{"review": "a", "stars": "bad"},\n {"review": "b'
CLASSIFY = ["+recipe=bert_classify", "data.text_column=review", "data.label_column=stars", "data.num_classes=3"]

# (name, the overrides given the test's tmp_path, fragments the one paragraph must contain)
BAD: list[tuple[str, Callable[[Path], list[str]], list[str]]] = [
    ("missing text column", lambda p: [*CLASSIFY, f"data.path={_csv(p / 'rows.csv')}", "data.text_column=reviw"],
     ["data.text_column=reviw", "has no column reviw", "Did you mean data.text_column=review?", "review, stars"]),
    ("missing label column", lambda p: [*CLASSIFY, f"data.path={_csv(p / 'rows.csv')}", "data.label_column=star"],
     ["data.label_column=star", "Did you mean data.label_column=stars?"]),
    ("missing column, causal LM", lambda p: ["+recipe=smoke", f"data.path={_csv(p / 'rows.csv')}"],
     ["data.text_column=text", "has no column text", "Its columns: review, stars"]),
    ("empty file", lambda p: [*CLASSIFY, f"data.path={_jsonl(p / 'rows.jsonl', [])}"],
     ["rows.jsonl holds no rows", "Point data.path at a file with data in it"]),
    ("empty training split", lambda p: [*CLASSIFY, f"data.path={_jsonl(p / 'rows.jsonl', ROWS[:12])}"],
     ["leaves 11 training rows, fewer than data.batch_size=16", "an empty training split", "lower data.batch_size"]),
    ("mixed label kinds", lambda p: [*CLASSIFY, f"data.path={_jsonl(p / 'rows.jsonl', [*ROWS, ONE_ID])}"],
     ["mixes label kinds", "1 rows have integer labels (e.g. 1)", "60 have names", "the same kind on every row"]),
    ("label count against num_labels", lambda p: [*CLASSIFY, f"data.path={_csv(p / 'rows.csv')}",
                                                  "data.num_classes=4"],
     ["holds 3 classes (labels bad, good, great)", "model.num_labels=4", "Set data.num_classes=3"]),
    ("unreadable parquet", lambda p: [*CLASSIFY, f"data.path={_bytes(p / 'rows.parquet', b'not parquet')}"],
     ["cannot be read as Parquet", "damaged or not Parquet", "export it again"]),
    ("val_path without rows", lambda p: [*CLASSIFY, f"data.path={_csv(p / 'rows.csv')}",
                                         f"data.val_path={_jsonl(p / 'val.jsonl', [])}"],
     ["data.val_path=", "val.jsonl holds no rows"]),
    ("tokenizer larger than the embedding", lambda p: ["+recipe=smoke", f"data.tokenizer={_tokenizer(p)}"],
     ["token ids go up to 319", "embeds 256 ids, 0-255", "Set model.vocab_size=320", "data.tokenizer=bytes"]),
    ("no validation", lambda p: ["+recipe=smoke", "data.val_fraction=0"],
     ["data.val_fraction=0 would leave nothing to validate on", "data.val_path=FILE", "data.val_fraction=0.01"]),
    ("a malformed JSON line", lambda p: [*CLASSIFY, f"data.path={_lines(p / 'rows.jsonl', 7, MISSING_COMMA)}"],
     ["rows.jsonl, line 8: not valid JSON (", "at column", "fix or remove that line"]),
    ("a JSON line with an unterminated string", lambda p: [
        *CLASSIFY, f"data.path={_lines(p / 'rows.jsonl', 5, UNTERMINATED)}"],
     ["rows.jsonl, line 6: not valid JSON (Invalid control character at column 25)"]),  # the reason whole
    ("a JSON array cut short", lambda p: [*CLASSIFY, f"data.path={_bytes(p / 'rows.json', CUT_SHORT)}"],
     ["rows.json, line 2: not valid JSON (Unterminated string starting at column 13; the file is one JSON array)",
      "fix the JSON at that line"]),
    ("a JSON object holding the rows", lambda p: [
        *CLASSIFY, f"data.path={_bytes(p / 'rows.json', json.dumps({'data': ROWS}).encode())}"],
     ["rows.json is one JSON object, not rows: its key 'data' holds a list of 60 objects",
      "json.dump(data['data'], f)"]),
    ("a JSON line that is no object", lambda p: [*CLASSIFY, f"data.path={_lines(p / 'rows.jsonl', 3, '[1, 2]')}"],
     ["rows.jsonl, line 4: a JSON list, not an object with columns"]),
    ("a number among the texts", lambda p: [*CLASSIFY, f"data.path={_jsonl(p / 'rows.jsonl', [*ROWS, NUMBER_ROW])}"],
     ["data.text_column=review", "values of several types (row 61 is 5, a number)", "Make every review a string"]),
    ("a number as a text of a labelled text file", lambda p: [
        *CLASSIFY, f"data.path={_bytes(p / 'rows.txt', _lines(p / 'r.jsonl', 40, NUMBER_TEXT).read_bytes())}"],
     ["rows.txt, line 41: its review is 5, not a string", "a missing one as null"]),
    ("a Latin-1 byte in a CSV", lambda p: [*CLASSIFY, f"data.path={_latin1(_csv(p / 'rows.csv'), 'number 7')}"],
     ["rows.csv, line 9: the byte 0xe9 (at offset ", "is not UTF-8", "iconv -f latin1 -t utf-8",
      "read_csv(..., encoding='latin1')"]),
    ("a Latin-1 byte in JSON lines, causal LM", lambda p: [
        "+recipe=smoke", f"data.path={_latin1(_jsonl(p / 'rows.jsonl', ROWS), 'number 30')}",
        "data.text_column=review"],
     ["rows.jsonl, line 31: the byte 0xe9 (at offset ", "is not UTF-8", "rows.utf8.jsonl"]),
]


def _latin1(path: Path, after: str) -> Path:
    """``path`` with a Latin-1 "é" (the byte 0xe9, no UTF-8) inserted before the first ``after``."""
    data = path.read_bytes()
    at = data.index(after.encode())
    path.write_bytes(data[:at] + b"caf\xe9 " + data[at:])
    return path


def _lines(path: Path, good: int, bad: str) -> Path:
    """``good`` rows of JSON lines, then the line ``bad``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:good]) + bad + "\n")
    return path


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _tokenizer(tmp_path: Path) -> Path:
    save_tokenizer(tmp_path / "tokenizer")
    return tmp_path / "tokenizer"


@pytest.mark.parametrize(("name", "overrides", "fragments"), BAD, ids=[name for name, _, _ in BAD])
def test_bad_data_is_one_paragraph_naming_the_fix(name: str, overrides: Callable[[Path], list[str]],
                                                   fragments: list[str], tmp_path: Path) -> None:
    refused_in_one_paragraph(overrides(tmp_path), fragments)


def refused_in_one_paragraph(overrides: list[str], fragments: list[str]) -> None:
    """``precheck`` refuses ``overrides`` with one paragraph holding every fragment."""
    with pytest.raises(ConfigError) as info:
        precheck(overrides)
    message = str(info.value)
    assert "\n" not in message.strip(), "one paragraph"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"


def test_a_byte_not_utf8_is_found_at_its_line_and_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first byte that is not UTF-8, its line and offset, whatever the blocks the file is read in (a line longer
    than a block, a character of several bytes at a block's end); a file of UTF-8 has none."""
    from runner.data.reading import tables

    monkeypatch.setattr(tables, "BLOCK_BYTES", 5)
    good = "naïve\n\ncafé crème, a line longer than a block\n日本語\n".encode()
    path = _bytes(tmp_path / "rows.jsonl", good + b"ok \xe9t\xe9\n")
    assert tables.bad_utf8([_bytes(tmp_path / "good.jsonl", good)]) is None
    assert tables.bad_utf8([tmp_path / "good.jsonl", path]) == (str(path), 5, len(good) + 3, 0xE9)


def test_a_byte_not_utf8_is_refused_again_once_its_table_is_cached(tmp_path: Path) -> None:
    """JSON lines' text is read into Arrow unchecked and cached by ``datasets``: a second run, reading that cache,
    refuses the file as the first did (not a ``UnicodeDecodeError`` at the first row read)."""
    overrides = ["+recipe=smoke", f"data.path={_latin1(_jsonl(tmp_path / 'rows.jsonl', ROWS), 'number 3')}",
                 "data.text_column=review"]
    for _ in range(2):
        refused_in_one_paragraph(overrides, ["rows.jsonl, line 4: the byte 0xe9", "is not UTF-8"])


def test_no_validation_share_composes_with_a_validation_file(tmp_path: Path) -> None:
    """data.val_fraction=0 is refused (a run always validates) unless data.val_path gives the validation data."""
    rows = _csv(tmp_path / "rows.csv")
    precheck([*CLASSIFY, f"data.path={rows}", f"data.val_path={_jsonl(tmp_path / 'val.jsonl', ROWS)}",
              "data.val_fraction=0"])


def test_the_model_label_and_column_checks_pass_on_good_data(tmp_path: Path) -> None:
    precheck([*CLASSIFY, f"data.path={_csv(tmp_path / 'rows.csv')}"])
    saved = save_model(tmp_path / "bert", task="sequence_classification", model_type="bert")
    precheck([*CLASSIFY, f"data.path={_csv(tmp_path / 'rows.csv')}", f"model.path={saved}"])


def test_bad_data_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    bad = _bytes(tmp_path / "rows.parquet", b"not parquet")
    work = tmp_path / "work"
    work.mkdir()
    # Through the entry point in this process (tests/test_bad_input.py keeps one refusal in a real process).
    proc = run_cli("+recipe=smoke", f"data.path={bad}", cwd=work)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("runner: ") and "cannot be read as Parquet" in lines[0], proc.stderr
    assert proc.stdout == "" and list(work.iterdir()) == []  # no outputs/, no run directory
