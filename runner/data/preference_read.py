"""Reading a table of preference pairs once per process: its shape, its rows tokenized (cached), and the rows that
cannot be read as pairs refused with their numbers (:mod:`runner.data.preference` builds its splits on it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.data.instruct_chat import SHAPES_HINT, scan, unknown_role
from runner.data.instruct_formats import Render
from runner.data.preference_encode import PROBLEM, encode_pairs
from runner.data.preference_formats import IDENTICAL, PairFormat, resolve_shape
from runner.data.sources import DataError, resolve
from runner.data.tables import load_table
from runner.data.tokenizers import Tokenizer, is_bytes

SHIPPED = "examples/data/preference.jsonl"
"""The preference file runner ships (examples/data/make_preference.py writes it)."""


@dataclass
class PreparedPairs:
    """One table's rows, read and encoded: its shape, its rows as ids, where they came from."""

    fmt: PairFormat
    encoded: Any
    source: str
    stamp: Any
    """What identifies the rows' content (their files' stamps), for caches keyed by the data."""
    files: int
    rows: int
    dropped: dict[str, int]


_PREPARED: dict[tuple[Any, ...], PreparedPairs] = {}
"""Tables this process has prepared, by their settings: the checks before a run and the run itself encode once."""


def prepare_pairs(where: str, key: str, tokenizer: Tokenizer, render: Render | None, prompt_column: str,
                  chosen_column: str, rejected_column: str, prompt_template: str | None, chat_template: str | None,
                  max_examples: int | None, roles: dict[str, str] | None = None) -> PreparedPairs:
    """The rows ``where`` names, in their shape, encoded; :class:`DataError` when they cannot be."""
    from runner.data.encoding import rows_stamp

    memo = (where, key, tokenizer.name, prompt_column, chosen_column, rejected_column, prompt_template,
            chat_template, max_examples, tuple(sorted((roles or {}).items())))
    if memo in _PREPARED:
        return _PREPARED[memo]
    source = resolve(where, key)
    if not source.is_table:
        raise DataError(f"{key}={where} is text, not a table: data=preference reads rows with a chosen and a rejected "
                        "completion (and a prompt). Give a .jsonl, .csv or .parquet file, or a save_to_disk folder "
                        f"(e.g. {SHIPPED}).")
    rows, _ = load_table(source)
    if len(rows) == 0:
        raise DataError(f"{key}={where} holds no rows. Point {key} at a file with pairs in it.")
    fmt = resolve_shape(rows.column_names, rows[0], source, prompt_column, chosen_column, rejected_column,
                        prompt_template, roles)
    if fmt.shape.conversational and render is None:
        which = "UTF-8 bytes" if is_bytes(tokenizer.name) else f"the tokenizer {tokenizer.name}"
        raise DataError(f"{key}={where} holds conversations ({SHAPES_HINT}): {which} has "
                        "no chat template to render them with. Give one as data.chat_template='{% for m in messages "
                        "%}...' (a Jinja template over messages, with add_generation_prompt), or a tokenizer that has "
                        "one (data.tokenizer=DIR).")
    dropped: dict[str, int] = {}
    if max_examples is not None and len(rows) > max_examples:
        dropped[f"data.max_examples={max_examples}"] = len(rows) - max_examples
        rows = rows.select(range(max_examples))
    if fmt.shape.conversational:  # every turn's role known or mapped, before anything is tokenized
        table = rows.with_format("arrow")
        for column in (c for c in (fmt.prompt_column, fmt.chosen_column, fmt.rejected_column) if c is not None):
            turns = scan(table[column], roles)
            if turns.unknown_row is not None:
                raise unknown_role(turns, source, column)
    encoded = encode_pairs(rows, fmt, tokenizer, render, chat_template, f"{key}={where}")
    _PREPARED[memo] = PreparedPairs(fmt, encoded, source.describe(), rows_stamp(rows), len(source.files), len(rows),
                                    dropped)
    return _PREPARED[memo]


def refuse_problems(prepared: PreparedPairs, key: str, where: str) -> None:
    """A :class:`DataError` naming rows that cannot train (a malformed conversation, no shared prompt); a row whose
    completions are the same is left out, not refused."""
    problems = prepared.encoded.data.column(PROBLEM).to_pylist()
    bad = [(i, p) for i, p in enumerate(problems) if p and p != IDENTICAL]
    if bad:
        i, problem = bad[0]
        rows = ", ".join(str(j) for j, _ in bad[:5]) + (", ..." if len(bad) > 5 else "")
        fmt = prepared.fmt
        raise DataError(f"{key}={where}: {len(bad)} of {len(problems)} rows cannot be read as preference pairs (rows "
                        f"{rows}, counting from 0; row {i}: {problem}). Each row holds a {fmt.chosen_column} and a "
                        f"{fmt.rejected_column} completion of one prompt: texts, or conversations ({SHAPES_HINT}; "
                        "a CSV cell holds the list as JSON); without a prompt column, "
                        "chosen and rejected start with the same prompt. Fix or remove those rows.")
    if all(p == IDENTICAL for p in problems):
        raise DataError(f"{key}={where}: every row's {prepared.fmt.chosen_column} is identical to its "
                        f"{prepared.fmt.rejected_column}: a pair of the same completion teaches no preference. Check "
                        "the columns (data.chosen_column, data.rejected_column).")
