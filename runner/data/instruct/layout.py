"""Which prepared examples train and validate, fitted to ``data.seq_len`` and packed: computed once, then read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runner.data.instruct.fit import Encoded, Fitted, fit
from runner.data.reading.sources import prepared_store
from runner.data.sequences.windows import Spans
from runner.data.splits import VAL_PATH, split_documents
from runner.data.store import store_dir, store_key
from runner.data.store.arrays import Store, StoreWriter
from runner.packing.bins import PackRows, pack_rows

FIGURES = ("cut", "left_out", "prompt_tokens", "answer_tokens", "loss_tokens", "whole", "answer_runs")
VERSION = 2  # What a layout holds; a change makes a new one (2: the answers in the loss counted, for a chat's turns)


@dataclass
class Layout:
    """Training's and validation's examples, fitted (and packed), and how validation was chosen."""

    train: Fitted
    val: Fitted
    split_how: str


def layout_key(parts: list[str], seq_len: int, answers_only: bool, packing: bool, val_fraction: float,
               seed: int) -> str:
    """A layout's name: the examples' stores (training's, then validation's when ``data.val_path`` gives it) and every
    setting the layout depends on."""
    split = None if len(parts) > 1 else [val_fraction, seed]
    return store_key("layout", parts, seq_len, answers_only, packing, split, VERSION)


def arrange(stores: list[Store], keys: list[str], seq_len: int, answers_only: bool, packing: bool,
            val_fraction: float, seed: int, what: str) -> Layout:
    """The layout of ``stores`` (training's first; validation's second when it has rows of its own), computed the first
    time and read after."""
    encoded = [Encoded(s) for s in stores]
    directory = store_dir(layout_key(keys, seq_len, answers_only, packing, val_fraction, seed))

    def build(tmp: Path) -> None:
        train_rows, val_rows, how = split_rows(len(encoded[0]), len(encoded[-1]), len(encoded) > 1, val_fraction,
                                               seed, what, "examples")
        fitted = (fit(encoded[0], train_rows, seq_len, answers_only), fit(encoded[-1], val_rows, seq_len,
                                                                            answers_only))
        columns = {}
        for name, f in zip(("train", "val"), fitted, strict=True):
            columns[f"{name}_rows"] = f.rows
            if packing:
                packs = pack_rows(f.spans.lengths - 1, seq_len)
                columns[f"{name}_order"], columns[f"{name}_starts"] = packs.order, packs.starts
        writer = StoreWriter(tmp, ragged=dict.fromkeys(columns, "int64"))
        writer.append({name: (values, np.array([len(values)])) for name, values in columns.items()})
        writer.finish({"split_how": how, **{f"{name}_{k}": getattr(f, k) for name, f in zip(("train", "val"), fitted,
                                                                                             strict=True)
                                           for k in FIGURES}})

    store, _ = prepared_store(directory, build, what)
    return Layout(_read(store, "train", encoded[0], seq_len, packing), _read(store, "val", encoded[-1], seq_len,
                                                                              packing), store.meta["split_how"])


def split_rows(n: int, n_val: int, val_path: bool, val_fraction: float, seed: int, what: str,
               more: str) -> tuple[np.ndarray, np.ndarray, str]:
    """The rows that train and validate (``val_path``: all ``n`` train, the ``n_val`` of data.val_path validate) and
    how they were chosen; a ``DataError`` for a split of fewer than two rows (``more``: what to give more of)."""
    if val_path:
        return np.arange(n), np.arange(n_val), VAL_PATH
    if n < 2:
        from runner.data.reading.sources import DataError

        raise DataError(f"{what} holds {n} row: a split needs two (one to train, one to validate). Give more "
                        f"{more}, or validation rows as data.val_path.")
    split = split_documents(n, val_fraction, seed)
    return np.asarray(split.train), np.asarray(split.val), split.how.replace("document", "row")


def _read(store: Store, name: str, encoded: Encoded, seq_len: int, packing: bool) -> Fitted:
    """One part of a stored layout, as ``fit`` made it."""
    rows = np.asarray(store.ragged(f"{name}_rows").values[:], dtype=np.int64)
    starts = encoded.starts[rows]
    spans = Spans(starts, np.minimum(encoded.ends[rows], starts + seq_len + 1))
    meta: dict[str, Any] = store.meta
    packs = None
    if packing:
        packs = PackRows(store.ragged(f"{name}_order").values[:], store.ragged(f"{name}_starts").values[:])
    return Fitted(encoded.tokens, encoded.answers, spans, rows, packs=packs,
                  **{k: int(meta[f"{name}_{k}"]) for k in FIGURES})
