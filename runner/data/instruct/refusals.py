"""The refusals instruction and preference data share before a run: a ``data.val_path`` naming ``data.path``, a
tokenizer without an EOS token, too few rows for one batch."""

from __future__ import annotations

from pathlib import Path


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


def batch_refusal(path: str, rows: int, what: str, seq_len: int, batch_size: int, more: str) -> str | None:
    """The refusal of training data that leaves fewer ``what`` (``rows``) than one batch; ``more``: what to add."""
    if rows >= batch_size:
        return None
    return (f"data.path={path} leaves {rows} {what} at data.seq_len={seq_len}, fewer than data.batch_size="
            f"{batch_size}: training would have no batch. Give more {more}, or lower data.batch_size (or "
            "data.val_fraction).")
