"""What instruction and preference data share: the refusals before a run (a ``data.val_path`` naming ``data.path``, a
tokenizer without an EOS token, too few rows for one batch), the reading of their two tables, their data modules'
base."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from runner.config.target_objects import TokenRange
from runner.data.instruct.encode import eos_id
from runner.data.reading.sources import DataError, names_something, val_path_refusal
from runner.data.sequences.padding import PadTo
from runner.data.store.shared import origin
from runner.data.summary import SplitData
from runner.data.tokens.tokenizers import check_tokenizer, load_tokenizer, token_range

log = logging.getLogger(__name__)


class PromptedData(SplitData):
    """A data module of prompts and what answers them (instruction rows, preference pairs): its settings, read from
    ``data.path`` and ``data.val_path`` with ``data.tokenizer``."""

    def __init__(self, path: str | None, val_path: str | None, tokenizer: str | None, roles: Mapping[str, str],
                 seq_len: int, packing: bool, batch_size: int, val_fraction: float, seed: int, num_workers: int,
                 pad_to: PadTo | None, **settings: Any) -> None:
        super().__init__()
        roles = {str(k): str(v) for k, v in (roles or {}).items()}
        self.settings: dict[str, Any] = {**settings, "roles": roles or None}
        self.path, self.val_path, self.tokenizer_spec = path, val_path, tokenizer
        self.seq_len, self.packing, self.batch_size = seq_len, packing, batch_size
        self.val_fraction, self.seed, self.num_workers = val_fraction, seed, num_workers
        self.pad_to = pad_to or PadTo()
        self.pad_id = 0
        self.data_figures: dict[str, Any] = {}
        self.prompt_format: dict[str, Any] | None = None
        self._parts: list[Any] = []

    @staticmethod
    def token_range(tokenizer: str | None = None, **_: Any) -> TokenRange | None:
        """The ids this data gives the model (the vocabulary check compares them with the model's embedding)."""
        return token_range(tokenizer, offset=0)

    def own_figures(self) -> dict[str, Any]:
        return self.data_figures

    def say_parts(self, rows: str) -> None:
        """Where each table's ``rows`` came from, in the log: prepared now (how long it took), or from the cache."""
        for part, where in zip(self._parts, (f"data.path={self.path}", f"data.val_path={self.val_path}"), strict=False):
            log.info("data: %s of %s%s", rows, where, origin(part.store, part.built))


def read_to_check(module: Callable[[], Any], path: str | None, val_path: str | None, tokenizer: str | None,
                  missing: str, ends: str) -> str | tuple[Any, Any] | None:
    """The refusals both share, then the training and validation rows ``module()`` reads: a refusal, the rows, or
    None where a path names nothing (the existence check says so)."""
    if (message := check_tokenizer(tokenizer)) is not None:
        return message
    if path is None:
        return missing
    if (message := val_path_refusal(path, val_path)) is not None:
        return message
    if not (names_something(path) and names_something(val_path)):
        return None
    try:
        tok = load_tokenizer(tokenizer)
        if eos_id(tok) is None:  # ``ends``: where the data puts one, and why
            return (f"data.tokenizer={tokenizer} has no EOS token: {ends}. Give a tokenizer with one "
                    "(tokenizer.eos_token = '</s>'; save_pretrained), or train on bytes (data.tokenizer=bytes).")
        return module().read(tok)
    except DataError as e:
        return str(e)


def prepare_parts(path: str | None, val_path: str | None, prepare: Callable[[str, str], Any],
                  refuse: Callable[[Any, str, str], None]) -> list[Any]:
    """data.path's table and data.val_path's (when given), each prepared and its rows that cannot train refused."""
    parts = []
    for key, where in (("data.path", path), ("data.val_path", val_path)):
        if where is not None:
            parts.append(prepare(where, key))
            refuse(parts[-1], key, where)
    return parts


def batch_refusal(path: str | None, rows: int, what: str, seq_len: int, batch_size: int, more: str) -> str | None:
    """The refusal of training data that leaves fewer ``what`` (``rows``) than one batch; ``more``: what to add."""
    if rows >= batch_size:
        return None
    return (f"data.path={path} leaves {rows} {what} at data.seq_len={seq_len}, fewer than data.batch_size="
            f"{batch_size}: training would have no batch. Give more {more}, or lower data.batch_size (or "
            "data.val_fraction).")
