"""What runner reads from any batch, whatever its structure (torch only: no Lightning import)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def iter_tensors(batch: Any) -> Iterator[torch.Tensor]:
    """The tensors of a batch (nested tuples, lists, dicts), in a fixed order."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, (list, tuple)):
        for b in batch:
            yield from iter_tensors(b)
    elif isinstance(batch, dict):
        for b in batch.values():
            yield from iter_tensors(b)
