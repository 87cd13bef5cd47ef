"""What instruction and preference data share: the refusals before a run (a ``data.val_path`` naming ``data.path``, a
tokenizer without an EOS token, too few rows for one batch) and the reading of their two tables."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.data.instruct.encode import eos_id
from runner.data.reading.sources import DataError, names_something
from runner.data.tokens.tokenizers import check_tokenizer, load_tokenizer


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
        if (message := eos_refusal(tokenizer, eos_id(tok), ends)) is not None:
            return message
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


def say_parts(parts: list[Any], path: str | None, val_path: str | None) -> None:
    """Where each table's rows came from, in the log."""
    for part, where in zip(parts, (f"data.path={path}", f"data.val_path={val_path}"), strict=False):
        part.say(where)


def val_path_refusal(path: str, val_path: str | None) -> str | None:
    """The refusal of a data.val_path that is data.path itself (None: it is not)."""
    if val_path is not None and Path(val_path).expanduser().resolve() == Path(path).expanduser().resolve():
        return (f"data.val_path={val_path} is data.path itself: validation would be the training data. Give "
                "other rows, or drop data.val_path to validate on a split of data.path.")
    return None


def eos_refusal(tokenizer: str | None, eos: int | None, ends: str) -> str | None:
    """The refusal of a tokenizer with no EOS token (``eos`` None); ``ends`` says where the data puts one and why."""
    if eos is not None:
        return None
    return (f"data.tokenizer={tokenizer} has no EOS token: {ends}. Give a tokenizer with one (tokenizer.eos_token = "
            "'</s>'; save_pretrained), or train on bytes (data.tokenizer=bytes).")


def batch_refusal(path: str | None, rows: int, what: str, seq_len: int, batch_size: int, more: str) -> str | None:
    """The refusal of training data that leaves fewer ``what`` (``rows``) than one batch; ``more``: what to add."""
    if rows >= batch_size:
        return None
    return (f"data.path={path} leaves {rows} {what} at data.seq_len={seq_len}, fewer than data.batch_size="
            f"{batch_size}: training would have no batch. Give more {more}, or lower data.batch_size (or "
            "data.val_fraction).")
