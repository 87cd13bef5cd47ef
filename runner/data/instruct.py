"""Instruction and chat data for a causal LM: the loss on the answers, an EOS after each (``data=instruct``).

Rows come from a table (``.jsonl``/``.json``, ``.csv``, ``.parquet``, a ``save_to_disk`` folder) in one of three
shapes (:mod:`runner.data.instruct_formats`), are tokenized once into a cached Arrow file with their answers
marked (:mod:`runner.data.instruct_encode`), and fitted to ``data.seq_len``. Validation is ``data.val_path``'s
rows, else a seeded split by row, never overlapping training. Batches are padded per the shape policy
(``(inputs, targets)``, targets ``IGNORE_INDEX`` outside the loss), or, with ``data.packing=true``, rows of exactly
``seq_len`` holding several examples that never attend to one another (:mod:`runner.data.packed`).

Everything that makes the data unusable is refused before the run (``check_arguments``): a missing column, a
conversation column without a chat template, empty answers, no example that fits ``seq_len`` whole.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from runner.config.data_schemas import TrainOn
from runner.config.target_objects import TokenRange
from runner.data.instruct_chat import SHAPES_HINT, Turns, scan, unknown_role
from runner.data.instruct_encode import PROBLEM, Fitted, encode_instructions, eos_id, fit
from runner.data.instruct_formats import Format, Kind, Render, prompt_info, resolve_format, template_render
from runner.data.instruct_summary import describe, summarize
from runner.data.packed import Examples, Packs, pack_collate
from runner.data.padding import PadCollate, PadTo
from runner.data.sources import DataError, names_something, resolve
from runner.data.splits import VAL_PATH, split_documents
from runner.data.summary import DataSummary
from runner.data.table_errors import json_object_of_rows
from runner.data.tables import load_table
from runner.data.tokenizers import SavedTokenizer, Tokenizer, check_tokenizer, is_bytes, load_tokenizer, token_range
from runner.data.traits import DataTraits, ValMetric

log = logging.getLogger(__name__)

SHIPPED = "examples/data/instruct.jsonl"
"""The instruction file runner ships (examples/data/make_instruct.py writes it)."""


@dataclass
class Prepared:
    """One setting's rows, read and encoded: the table's shape, its rows as ids, where they came from, and a chat's
    turns."""

    fmt: Format
    encoded: Any
    source: str
    files: int
    rows: int
    dropped: dict[str, int]
    turns: Turns | None = None


_PREPARED: dict[tuple[Any, ...], Prepared] = {}
"""Rows this process has prepared, by their settings: the checks before a run and the run itself encode once."""


def prepare(where: str, key: str, tokenizer: Tokenizer, render: Render | None, prompt_column: str,
            response_column: str, messages_column: str | None, prompt_template: str | None,
            chat_template: str | None, max_examples: int | None, roles: dict[str, str] | None = None) -> Prepared:
    """The rows ``where`` names, in their shape, encoded; :class:`DataError` when they cannot be."""
    memo = (where, key, tokenizer.name, prompt_column, response_column, messages_column, prompt_template,
            chat_template, max_examples, tuple(sorted((roles or {}).items())))
    if memo in _PREPARED:
        return _PREPARED[memo]
    source = resolve(where, key)
    if not source.is_table:
        raise DataError(f"{key}={where} is text, not a table: data=instruct reads rows with a prompt and a response "
                        "(or a conversation). Give a .jsonl, .csv or .parquet file, or a save_to_disk folder "
                        f"(e.g. {SHIPPED}); plain text trains with data=text.")
    rows, _ = load_table(source)
    if len(rows) == 0:
        raise DataError(f"{key}={where} holds no rows. Point {key} at a file with examples in it.")
    try:
        fmt = resolve_format(rows.column_names, source, prompt_column, response_column, messages_column,
                             prompt_template, roles)
    except DataError:
        nested = json_object_of_rows(source)  # {"data": [...]}: one row to datasets, rows to the user
        if nested is not None:
            raise DataError(nested) from None
        raise
    if fmt.kind is Kind.chat and render is None:
        which = "UTF-8 bytes" if is_bytes(tokenizer.name) else f"the tokenizer {tokenizer.name}"
        raise DataError(f"data.messages_column={fmt.columns[0]}: {which} has no chat template to render the "
                        "conversations with. Give one as data.chat_template='{% for m in messages %}...' (a Jinja "
                        "template over messages, with add_generation_prompt), or a tokenizer that has one "
                        "(data.tokenizer=DIR), or use prompt/response columns.")
    dropped: dict[str, int] = {}
    if max_examples is not None and len(rows) > max_examples:
        dropped[f"data.max_examples={max_examples}"] = len(rows) - max_examples
        rows = rows.select(range(max_examples))
    turns = None
    if fmt.kind is Kind.chat:
        turns = scan(rows.with_format("arrow")[fmt.columns[0]], roles)
        if turns.unknown_row is not None:
            raise unknown_role(turns, source, fmt.columns[0])
        fmt = dataclasses.replace(fmt, sharegpt=turns.sharegpt)
    encoded = encode_instructions(rows, fmt, tokenizer, render, chat_template, f"{key}={where}")
    _PREPARED[memo] = Prepared(fmt, encoded, source.describe(), len(source.files), len(rows), dropped, turns)
    return _PREPARED[memo]


def refuse_problems(prepared: Prepared, key: str, where: str) -> None:
    """A :class:`DataError` naming rows that cannot train (an empty answer, a malformed conversation)."""
    problems = prepared.encoded.data.column(PROBLEM).to_pylist()
    bad = [(i, p) for i, p in enumerate(problems) if p]
    if not bad:
        return
    empty = [i for i, p in bad if p == "an empty answer"]
    column = prepared.fmt.answer_column
    if empty:
        raise DataError(f"{key}={where}: {len(empty)} of {len(problems)} rows have an empty answer in column {column} "
                        f"(rows {', '.join(map(str, empty[:5]))}{', ...' if len(empty) > 5 else ''}, counting from "
                        "0): the model would learn to answer with nothing. Fill them in or remove those rows.")
    i, problem = bad[0]
    raise DataError(f"{key}={where}: {len(bad)} rows cannot be read as conversations (row {i}: {problem}). Each "
                    f"cell of {column} is {SHAPES_HINT}, with at least one assistant turn (a CSV cell holds it as "
                    "JSON); fix or remove those rows.")


class InstructDataModule(L.LightningDataModule):
    """Instruction or chat rows (module docstring). ``prompt_format`` (after setup): what ``generate`` needs."""

    def __init__(self, path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                 prompt_column: str = "prompt", response_column: str = "response",
                 messages_column: str | None = None, prompt_template: str | None = None,
                 chat_template: str | None = None, roles: Mapping[str, str] = MappingProxyType({}),
                 train_on: TrainOn | str = TrainOn.answer, seq_len: int = 256, packing: bool = False,
                 max_examples: int | None = None, batch_size: int = 16, val_fraction: float = 0.1, seed: int = 0,
                 num_workers: int = 0, pad_to: PadTo | None = None) -> None:
        super().__init__()
        self.settings: dict[str, Any] = dict(prompt_column=prompt_column, response_column=response_column,
                             messages_column=messages_column, prompt_template=prompt_template,
                             chat_template=chat_template, max_examples=max_examples,
                             roles={str(k): str(v) for k, v in (roles or {}).items()} or None)
        self.path, self.val_path, self.tokenizer_spec = path, val_path, tokenizer
        self.answers_only = TrainOn(train_on) is TrainOn.answer
        self.seq_len, self.packing, self.batch_size = seq_len, packing, batch_size
        self.val_fraction, self.seed, self.num_workers = val_fraction, seed, num_workers
        self.pad_to = pad_to or PadTo()
        self.pad_id = 0
        self.summary: DataSummary | None = None
        self.instruct_figures: dict[str, Any] = {}
        self.prompt_format: dict[str, Any] | None = None
        self._train: Examples | Packs | None = None
        self._val: Examples | Packs | None = None

    @staticmethod
    def check_arguments(path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                        seq_len: int = 256, batch_size: int = 16, packing: bool = False,
                        train_on: TrainOn | str = TrainOn.answer, val_fraction: float = 0.1, seed: int = 0,
                        **settings: Any) -> str | None:
        """What makes the data unusable, in one paragraph, before a run directory exists (None: nothing)."""
        if (message := check_tokenizer(tokenizer)) is not None:
            return message
        if path is None:
            return (f"data=instruct needs data.path: a table of examples with prompt and response columns, Alpaca's "
                    f"instruction/input/output, or conversations. runner ships one: data.path={SHIPPED} "
                    "(+recipe=instruct_tiny trains on it).")
        if val_path is not None and Path(val_path).expanduser().resolve() == Path(path).expanduser().resolve():
            return (f"data.val_path={val_path} is data.path itself: validation would be the training data. Give "
                    "other rows, or drop data.val_path to validate on a split of data.path.")
        if not (names_something(path) and names_something(val_path)):
            return None  # the existence check names it
        try:
            tok = load_tokenizer(tokenizer)
            if eos_id(tok) is None:
                return (f"data.tokenizer={tokenizer} has no EOS token: instruction data ends every answer with it, "
                        "so that the model learns to stop. Give a tokenizer with one (tokenizer.eos_token = '</s>'; "
                        "save_pretrained), or train on bytes (data.tokenizer=bytes).")
            data = InstructDataModule(path, val_path, tokenizer, seq_len=seq_len, batch_size=batch_size,
                                      packing=packing, train_on=train_on, val_fraction=val_fraction, seed=seed,
                                      **{k: v for k, v in settings.items() if k not in ("num_workers", "pad_to")})
            train, val = data.read(tok)
        except DataError as e:
            return str(e)
        for key, fitted in (("data.path", train), ("data.val_path", val)):
            if fitted is not None and fitted.whole == 0:
                where = path if key == "data.path" else val_path
                return (f"{key}={where}: every example is longer than data.seq_len={seq_len} tokens, so none would "
                        "train whole (each would lose the end of its answer and its EOS, or all of it). Raise "
                        "data.seq_len (the model's positions must cover it: model.block_size or "
                        "max_position_embeddings follow it in runner's options), or shorten the examples.")
        n = len(Packs(Examples(train.tokens, train.spans), seq_len, 0)) if packing else len(train.spans)
        if n < batch_size:
            what = "packed rows" if packing else "training examples"
            return (f"data.path={path} leaves {n} {what} at data.seq_len={seq_len}, fewer than data.batch_size="
                    f"{batch_size}: training would have no batch. Give more examples, or lower data.batch_size "
                    "(or data.val_fraction).")
        return None

    @staticmethod
    def token_range(tokenizer: str | None = None, **_: Any) -> TokenRange | None:
        """The ids this data gives the model (the vocabulary check compares them with the model's embedding)."""
        return token_range(tokenizer, offset=0)

    @staticmethod
    def traits(tokenizer: str | None = None, packing: bool = False, **_: Any) -> DataTraits:
        """Bits per byte on bytes; padded per batch and varying in shape, unless packed (one shape)."""
        metric = ValMetric.bits_per_byte if is_bytes(tokenizer) else ValMetric.none
        return DataTraits(metric, pads_per_batch=not packing, shapes_vary=not packing)

    def figures(self) -> dict[str, Any]:
        """What was read (``data/*``), after ``setup``."""
        return {**self.summary.figures(), **self.instruct_figures} if self.summary is not None else {}

    def render(self, tokenizer: Tokenizer) -> Render | None:
        inner = tokenizer.tokenizer if isinstance(tokenizer, SavedTokenizer) else None
        return template_render(inner, self.settings["chat_template"])

    def read(self, tokenizer: Tokenizer) -> tuple[Fitted, Fitted]:
        """Training and validation examples, fitted to ``seq_len`` (validation None: a split of training's rows,
        made by ``setup``); :class:`DataError` when the rows cannot train."""
        render = self.render(tokenizer)
        parts: list[Prepared] = []
        for key, where in (("data.path", self.path), ("data.val_path", self.val_path)):
            if where is not None:
                parts.append(prepare(where, key, tokenizer, render, **self.settings))
                refuse_problems(parts[-1], key, where)
        self._parts = parts
        train_rows, val_rows = self._split(parts[0].rows, len(parts) > 1)
        train = fit(parts[0].encoded, train_rows, self.seq_len, self.answers_only)
        val = fit(parts[-1].encoded, val_rows, self.seq_len, self.answers_only)
        return train, val

    def _split(self, n: int, val_path: bool) -> tuple[np.ndarray, np.ndarray]:
        if val_path:
            self.split_how = VAL_PATH
            return np.arange(n), np.arange(len(self._parts[1].encoded))
        if n < 2:
            raise DataError(f"data.path={self.path} holds {n} row: a split needs two (one to train, one to "
                            "validate). Give more examples, or validation rows as data.val_path.")
        split = split_documents(n, self.val_fraction, self.seed)
        self.split_how = split.how.replace("document", "row")
        return np.asarray(split.train), np.asarray(split.val)

    def prepare_data(self) -> None:
        """Read and tokenize once (rank 0 of each node, before the others set up): later reads hit the cache."""
        self.setup()

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        tokenizer = load_tokenizer(self.tokenizer_spec)
        self.pad_id = tokenizer.pad_id
        train, val = self.read(tokenizer)
        fmt = self._parts[0].fmt
        inner = tokenizer.tokenizer if isinstance(tokenizer, SavedTokenizer) else None
        self.prompt_format = {**prompt_info(fmt, self.settings["chat_template"], inner), "eos_id": eos_id(tokenizer)}
        self._train, self._val = (self._dataset(f) for f in (train, val))
        packs = [d.describe() for d in (self._train, self._val) if isinstance(d, Packs)]
        self.summary, self.instruct_figures = summarize(self._parts, (train, val), len(self._train),
                                                        len(self._val), self.split_how, fmt,
                                                        packs[0] if packs else None, self.batch_size)
        self.summary.say(self.seq_len)
        log.info("data: %s", describe(self.instruct_figures))
        if len(self._train) == 0 or len(self._val) == 0:  # the checks before the run say why first
            which = "training" if len(self._train) == 0 else "validation"
            raise ValueError(f"data: no {which} examples fit data.seq_len={self.seq_len}; raise data.seq_len or "
                             "give shorter examples.")

    def _dataset(self, fitted: Fitted) -> Examples | Packs:
        examples = Examples(fitted.tokens, fitted.spans, fitted.mask, self.answers_only)
        return Packs(examples, self.seq_len, self.pad_id) if self.packing else examples

    def _loader(self, ds: Examples | Packs | None, shuffle: bool) -> DataLoader:
        assert ds is not None, "setup() first"
        collate = pack_collate if self.packing else PadCollate(self.pad_to, self.pad_id)
        g = torch.Generator().manual_seed(self.seed)
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, drop_last=shuffle, generator=g,
                          collate_fn=collate, num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._val, shuffle=False)
