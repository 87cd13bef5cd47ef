"""Reading a table of preference pairs once: its shape checked, its rows tokenized on every core into a store (read
back by every later run and rank), the rows that cannot be read as pairs refused with their numbers."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.data.instruct.chat import SHAPES_HINT, SHAREGPT_ROLES, count_turns, unknown_role
from runner.data.instruct.encode import BYTES_EOS, InstructEncoder, largest_id, tokenizer_and_render
from runner.data.instruct.formats import Render
from runner.data.instruct.prepare import source_files, table_rows, table_source, table_store
from runner.data.preference.encode import (
    CHOSEN,
    EMPTY_CHOSEN,
    EMPTY_REJECTED,
    PROBLEM,
    PROMPT,
    REJECTED,
    SAME,
    VERSION,
    encode_rows,
)
from runner.data.preference.formats import NOTED, PairFormat, Shape, no_prompt, resolve_shape
from runner.data.reading.sources import DataError, Source, resolve
from runner.data.reading.tables import null_rows, row_places
from runner.data.store import digest_files, store_key
from runner.data.store.arrays import Store, StoreWriter, token_dtype
from runner.data.store.parallel import encode_table, table_batches
from runner.data.store.progress import Heartbeat
from runner.data.tokens.tokenizers import Tokenizer, is_bytes, tokenizer_stamp

# The preference file runner ships (examples/data/make_preference.py writes it)
SHIPPED = "examples/data/preference.jsonl"


@dataclass
class PreparedPairs:
    """One table's rows, read and encoded: its shape, its store, where the rows came from."""

    fmt: PairFormat
    store: Store
    source: str
    # What identifies the rows' ids (the store's name: the data's bytes, the tokenizer, the settings), for caches keyed
    # by the data
    stamp: str
    files: int
    rows: int
    dropped: dict[str, int]
    built: bool  # Whether this process prepared the store (else a run before it, or another rank, did)


# Tables this process has prepared or opened, by their store: the checks before a run and the run itself read them once
_PREPARED: dict[str, PreparedPairs] = {}


def prepare_pairs(where: str, key: str, tokenizer: Tokenizer, render: Render | None, prompt_column: str,
                  chosen_column: str, rejected_column: str, prompt_template: str | None, chat_template: str | None,
                  max_examples: int | None, roles: dict[str, str] | None = None) -> PreparedPairs:
    """The rows ``where`` names, in their shape, encoded; ``DataError`` when they cannot be."""
    source = table_source(where, key, "data=preference reads rows with a chosen and a rejected completion (and a "
                          f"prompt). Give a .jsonl, .csv or .parquet file, or a save_to_disk folder (e.g. {SHIPPED}).")
    settings = dict(prompt_column=prompt_column, chosen_column=chosen_column, rejected_column=rejected_column,
                    prompt_template=prompt_template, roles=roles)
    name = store_key("preference", digest_files(source_files(source)), tokenizer_stamp(tokenizer), chat_template,
                     max_examples, sorted((roles or {}).items()), sorted(SHAREGPT_ROLES.items()), BYTES_EOS, VERSION,
                     *(settings[k] for k in ("prompt_column", "chosen_column", "rejected_column", "prompt_template")))
    if name in _PREPARED:
        return _PREPARED[name]
    store, built, dropped = table_store(
        name, lambda tmp, progress: _build(tmp, source, tokenizer, render, settings, chat_template, max_examples,
                                           f"{key}={where}", progress), f"{key}={where}", max_examples)
    meta = store.meta
    fmt = PairFormat(Shape(meta["shape"]), meta["prompt_column"], meta["chosen_column"], meta["rejected_column"],
                     meta["template"], tuple((str(w), str(r)) for w, r in meta["roles"]))
    _PREPARED[name] = PreparedPairs(fmt, store, source.describe(), name, len(source.files), store.rows, dropped, built)
    return _PREPARED[name]


def _build(tmp: Any, source: Source, tokenizer: Tokenizer, render: Render | None, settings: dict[str, Any],
           chat_template: str | None, max_examples: int | None, what: str, progress: Any) -> None:
    """Reads the table, checks its shape and its conversations' roles, and writes its pairs' ids into ``tmp``."""
    rows = table_rows(source, what, "pairs")
    fmt = resolve_shape(rows.column_names, rows[0], source, **settings)
    total = len(rows) if max_examples is None else min(max_examples, len(rows))
    if fmt.prompt_column is not None and (missing := null_rows(rows, fmt.prompt_column)[:total]).any():
        raise no_prompt(source, fmt.prompt_column, missing)
    if fmt.shape.conversational and render is None:
        which = "UTF-8 bytes" if is_bytes(tokenizer.name) else f"the tokenizer {tokenizer.name}"
        raise DataError(f"{what} holds conversations ({SHAPES_HINT}): {which} has "
                        "no chat template to render them with. Give one as data.chat_template='{% for m in messages "
                        "%}...' (a Jinja template over messages, with add_generation_prompt), or a tokenizer that has "
                        "one (data.tokenizer=DIR).")
    columns = [c for c in (fmt.prompt_column, fmt.chosen_column, fmt.rejected_column) if c is not None]
    if fmt.shape.conversational:  # every turn's role known or mapped, before anything is tokenized
        for column in columns:
            with Heartbeat(f"reading the turns of {what}"):
                turns = count_turns(table_batches(rows, [column], total), column, settings["roles"])
            if turns.unknown_row is not None:
                raise unknown_role(turns, source, column)
    spec = None if is_bytes(tokenizer.name) else tokenizer.name
    tokenizer_and_render(spec, chat_template, given=tokenizer)  # this process's, inherited by forked workers
    dtype = token_dtype(largest_id(tokenizer))
    writer = StoreWriter(tmp, ragged={PROMPT: dtype, CHOSEN: dtype, REJECTED: dtype}, rows={PROBLEM: "int8"})
    encoder = InstructEncoder(fmt, spec, chat_template, encode_rows)
    done = encode_table(writer, table_batches(rows, columns, total), encoder, total, f"tokenizing {what}", progress)
    codes = np.fromfile(tmp / f"{PROBLEM}.rows", dtype=np.int8, count=writer.rows)
    notes = done.notes
    empty = np.flatnonzero((codes == EMPTY_CHOSEN) | (codes == EMPTY_REJECTED))
    writer.finish({**dataclasses.asdict(fmt), "shape": fmt.shape.value, "roles": [list(r) for r in fmt.roles],
                   "table_rows": len(rows), "same": int((codes == SAME).sum()), "empty": len(empty),
                   "empty_rows": [[int(i), bool(codes[i] == EMPTY_CHOSEN)] for i in empty[:NOTED]],
                   "unreadable": len(notes),
                   "unreadable_rows": [i for i, _ in notes[:NOTED]], "first_unreadable": list(notes[0]) if notes
                   else None, "seconds": round(done.seconds, 2), "processes": done.processes})


def refuse_problems(prepared: PreparedPairs, key: str, where: str) -> None:
    """A ``DataError`` naming the lines of rows that cannot train (an empty completion, a malformed conversation, no
    shared prompt); a row whose completions are the same is left out, not refused."""
    meta, n, fmt = prepared.store.meta, prepared.rows, prepared.fmt
    if meta["empty"]:
        source = resolve(where, key)
        sides = [f"{column} at {row_places(source, rows)}" for column, chosen in ((fmt.chosen_column, True),
                                                                                  (fmt.rejected_column, False))
                 if (rows := [i for i, c in meta["empty_rows"] if c == chosen])]
        more = ", ..." if meta["empty"] > NOTED else ""
        raise DataError(f"{key}={where}: {meta['empty']} of {n} rows have an empty completion ({'; '.join(sides)}"
                        f"{more}: missing, only whitespace, or a turn of no text): the pair would teach the model to "
                        "prefer, or to avoid, answering with nothing. Fill them in or remove those rows.")
    if meta["unreadable"]:
        i, problem = meta["first_unreadable"]
        source = resolve(where, key)
        more = ", ..." if meta["unreadable"] > NOTED else ""
        raise DataError(f"{key}={where}: {meta['unreadable']} of {n} rows cannot be read as preference pairs "
                        f"({row_places(source, meta['unreadable_rows'])}{more}; at {row_places(source, [i])}: "
                        f"{problem}). "
                        f"Each row holds a {fmt.chosen_column} and a {fmt.rejected_column} completion of one prompt: "
                        f"texts, or conversations ({SHAPES_HINT}; a CSV cell holds the list as JSON); without a prompt "
                        "column, chosen and rejected start with the same prompt. Fix or remove those rows.")
    if meta["same"] == n:
        raise DataError(f"{key}={where}: every row's {fmt.chosen_column} is identical to its "
                        f"{fmt.rejected_column}: a pair of the same completion teaches no preference. Check "
                        "the columns (data.chosen_column, data.rejected_column).")
