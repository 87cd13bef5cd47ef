"""Which part of the data validates, so that validation never overlaps training."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Split:
    """Which documents (indices into the document list) train and validate, and how they were chosen."""

    train: list[int]
    val: list[int]
    how: str  # In words, for the run's data section (``data/split``)


def split_documents(n: int, val_fraction: float, seed: int) -> Split:
    """``n >= 2`` documents split by a seeded shuffle: the first ``round(n * val_fraction)`` (at least 1, at most ``n -
    1``) of the shuffled order validate, the rest train in shuffled order."""
    if n < 2:
        raise ValueError(f"a split by document needs 2 documents, not {n}")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_val = min(n - 1, max(1, round(n * val_fraction)))
    return Split(train=order[n_val:], val=order[:n_val],
                 how=f"seeded split by document (seed {seed}): {n_val} of {n} validate")


def tail_cut(n_tokens: int, window: int, val_fraction: float) -> int | None:
    """Where one document of ``n_tokens`` is cut so that its last ``val_fraction`` of windows (at least one) of
    ``window`` tokens validate: tokens ``[0, cut)`` train, ``[cut, n_tokens)`` validate."""
    windows = n_tokens // window
    if windows < 2:
        return None
    n_val = min(windows - 1, max(1, round(windows * val_fraction)))
    return n_tokens - n_val * window


VAL_PATH = "data.val_path: its files validate, data.path trains"


def val_how(given: str | None, own: str | None) -> str:
    """The data section's words for a validation set of its own: ``data.val_path``'s files, or (``own``) the validation
    split of the ``DatasetDict`` that data.path names."""
    if given is None and own is not None:
        return f"the DatasetDict's own {Path(own).name} split ({own}) validates, its train split trains"
    return VAL_PATH
