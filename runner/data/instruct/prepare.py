"""Instruction rows prepared once into a store of token ids and answer runs, named by what they are made of."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.data.instruct.chat import SHAPES_HINT, SHAREGPT_ROLES, Turns, count_turns, unknown_role
from runner.data.instruct.encode import (
    ANSWERS,
    BYTES_EOS,
    EMPTY_ANSWER,
    IDS,
    PROBLEM,
    VERSION,
    InstructEncoder,
    largest_id,
    tokenizer_and_render,
)
from runner.data.instruct.formats import Format, Kind, resolve_format
from runner.data.reading.sources import SAVED, DataError, Source, prepared_store, resolve
from runner.data.reading.tables import json_object_of_rows, load_table, row_places
from runner.data.store import digest_files, store_dir, store_key
from runner.data.store.arrays import Store, StoreWriter, token_dtype
from runner.data.store.parallel import encode_table, table_batches
from runner.data.store.progress import Heartbeat
from runner.data.store.shared import progress_file
from runner.data.tokens.tokenizers import Tokenizer, is_bytes, tokenizer_stamp

SHIPPED = "examples/data/instruct.jsonl"  # The instruction file runner ships (examples/data/make_instruct.py writes it)
NOTED = 5  # Rows a problem's message names


@dataclass
class Prepared:
    """One setting's rows, prepared: the table's shape, its store, where the rows came from, what was left out."""

    fmt: Format
    store: Store
    key: str
    source: str
    files: int
    rows: int
    dropped: dict[str, int]
    problems: dict[str, Any]
    built: bool  # Whether this process prepared the store (else it read one a run before it, or another rank, wrote)
    turns: Turns | None = None  # A conversation column's turns (chat only)


def source_files(source: Source) -> list[Any]:
    """The files whose bytes make ``source``'s rows: its files, or every file of a ``save_to_disk`` folder."""
    if source.kind == SAVED:
        return sorted((f for f in source.files[0].rglob("*") if f.is_file()), key=str)
    return list(source.files)


def table_source(where: str, key: str, refusal: str) -> Source:
    """The table ``where`` names; a ``DataError`` ending in ``refusal`` when it is text."""
    source = resolve(where, key)
    if not source.is_table:
        raise DataError(f"{key}={where} is text, not a table: {refusal}")
    return source


def table_rows(source: Source, what: str, kind: str) -> Any:
    """The rows of the table ``source``; a ``DataError`` when it holds none."""
    rows, _ = load_table(source)
    if len(rows) == 0:
        raise DataError(f"{what} holds no rows. Point {what.split('=')[0]} at a file with {kind} in it.")
    return rows


def table_store(name: str, build: Callable[[Any, Any], None], what: str,
                max_examples: int | None) -> tuple[Store, bool, dict[str, int]]:
    """The store ``name`` (``build(tmp, progress)`` writes it when missing), whether this process built it, and the
    rows ``data.max_examples`` left out."""
    directory = store_dir(name)
    store, built = prepared_store(directory, lambda tmp: build(tmp, progress_file(directory)), what)
    cut = store.meta["table_rows"] - store.rows
    return store, built, {f"data.max_examples={max_examples}": cut} if cut > 0 else {}


def examples_key(data_digest: str, tokenizer: Any, prompt_column: str, response_column: str,
                 messages_column: str | None, prompt_template: str | None, chat_template: str | None,
                 max_examples: int | None, roles: dict[str, str] | None = None) -> str:
    """The store's name: everything a row's ids and answers depend on."""
    return store_key("instruct", data_digest, tokenizer, prompt_column, response_column, messages_column,
                     prompt_template, chat_template, max_examples, sorted((roles or {}).items()),
                     sorted(SHAREGPT_ROLES.items()), BYTES_EOS, VERSION)


# Rows this process has prepared or opened, by their settings: the checks before a run and the run itself read them once
_PREPARED: dict[str, Prepared] = {}


def prepare(where: str, key: str, tokenizer: Tokenizer, prompt_column: str, response_column: str,
            messages_column: str | None, prompt_template: str | None, chat_template: str | None,
            max_examples: int | None, roles: dict[str, str] | None = None) -> Prepared:
    """The rows ``where`` names, in their shape, prepared; ``DataError`` when they cannot be."""
    source = table_source(where, key, "data=instruct reads rows with a prompt and a response (or a conversation). "
                          "Give a .jsonl, .csv or .parquet file, or a save_to_disk folder "
                          f"(e.g. {SHIPPED}); plain text trains with data=text.")
    name = examples_key(digest_files(source_files(source)), tokenizer_stamp(tokenizer), prompt_column,
                        response_column, messages_column, prompt_template, chat_template, max_examples, roles)
    if name in _PREPARED:
        return _PREPARED[name]
    settings = dict(prompt_column=prompt_column, response_column=response_column, messages_column=messages_column,
                    prompt_template=prompt_template, roles=roles)
    store, built, dropped = table_store(
        name, lambda tmp, progress: _build(tmp, source, tokenizer, settings, chat_template, max_examples,
                                           f"{key}={where}", progress), f"{key}={where}", max_examples)
    meta = store.meta
    fmt = Format(Kind(meta["kind"]), tuple(meta["columns"]), meta["template"],
                 tuple((str(w), str(r)) for w, r in meta["roles"]), bool(meta["sharegpt"]))
    _PREPARED[name] = Prepared(fmt, store, name, source.describe(), len(source.files), store.rows, dropped,
                               meta["problems"], built, Turns.from_meta(meta["turns"]) if meta["turns"] else None)
    return _PREPARED[name]


def _build(tmp: Any, source: Source, tokenizer: Tokenizer, settings: dict[str, Any], chat_template: str | None,
           max_examples: int | None, what: str, progress: Any) -> None:
    """Reads the table, checks its shape, and writes its rows' ids into the store directory ``tmp``."""
    rows = table_rows(source, what, "examples")
    try:
        fmt = resolve_format(rows.column_names, source, **settings)
    except DataError:
        nested = json_object_of_rows(source)  # {"data": [...]}: one row to datasets, rows to the user
        if nested is not None:
            raise DataError(nested) from None
        raise
    _, render = tokenizer_and_render(tokenizer.name, chat_template, given=tokenizer)
    if fmt.kind is Kind.chat and render is None:
        which = "UTF-8 bytes" if is_bytes(tokenizer.name) else f"the tokenizer {tokenizer.name}"
        raise DataError(f"data.messages_column={fmt.columns[0]}: {which} has no chat template to render the "
                        "conversations with. Give one as data.chat_template='{% for m in messages %}...' (a Jinja "
                        "template over messages, with add_generation_prompt), or a tokenizer that has one "
                        "(data.tokenizer=DIR), or use prompt/response columns.")
    total = len(rows) if max_examples is None else min(max_examples, len(rows))
    turns = None
    if fmt.kind is Kind.chat:  # every turn's role known before anything is tokenized
        with Heartbeat(f"reading the turns of {what}"):
            turns = count_turns(table_batches(rows, [fmt.columns[0]], total), fmt.columns[0], settings["roles"])
        if turns.unknown_row is not None:
            raise unknown_role(turns, source, fmt.columns[0])
        fmt = dataclasses.replace(fmt, sharegpt=turns.sharegpt)
    writer = StoreWriter(tmp, ragged={IDS: token_dtype(largest_id(tokenizer)), ANSWERS: "int32"},
                         rows={PROBLEM: "int8"})
    encoder = InstructEncoder(fmt, None if is_bytes(tokenizer.name) else tokenizer.name, chat_template)
    columns = [c for c in fmt.columns if c]
    done = encode_table(writer, table_batches(rows, columns, total), encoder, total, f"tokenizing {what}", progress)
    # What is wrong with rows, from the problem codes just written: empty answers (how many, the first rows), and rows
    # that cannot be read (how many, the first one and why)
    codes = np.fromfile(tmp / f"{PROBLEM}.rows", dtype=np.int8, count=writer.rows)
    empty, notes = np.flatnonzero(codes == EMPTY_ANSWER), done.notes
    problem = {"empty": int(len(empty)), "empty_rows": empty[:NOTED].tolist(), "unreadable": len(notes),
               "first_unreadable": list(notes[0]) if notes else None}
    writer.finish({"kind": fmt.kind.value, "columns": list(fmt.columns), "template": fmt.template,
                   "roles": [list(r) for r in fmt.roles], "sharegpt": fmt.sharegpt,
                   "turns": turns.as_meta() if turns is not None else None, "table_rows": len(rows),
                   "problems": problem, "seconds": round(done.seconds, 2), "processes": done.processes})


def refuse_problems(prepared: Prepared, key: str, where: str) -> None:
    """A ``DataError`` naming rows that cannot train (an empty answer, a malformed conversation) by their lines."""
    p = prepared.problems
    column = prepared.fmt.answer_column
    if p["empty"]:
        first = p["empty_rows"]
        raise DataError(f"{key}={where}: {p['empty']} of {prepared.rows} rows have an empty answer in column {column} "
                        f"({row_places(resolve(where, key), first)}{', ...' if p['empty'] > len(first) else ''}): "
                        "the model would learn to answer with nothing. Fill them in or remove those rows.")
    if p["unreadable"]:
        i, problem = p["first_unreadable"]
        raise DataError(f"{key}={where}: {p['unreadable']} rows cannot be read as conversations "
                        f"({row_places(resolve(where, key), [i])}: {problem}). Each cell of {column} is {SHAPES_HINT}, "
                        "with at least one assistant turn (a CSV cell holds it as JSON); fix or remove those rows.")
