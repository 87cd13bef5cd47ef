"""What runner reads from any batch, whatever its structure (torch only: no Lightning import)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

import torch

Path = tuple[Any, ...]  # Where a tensor sits in a batch: the indices, keys and field names that lead to it


def walk_tensors(batch: Any, path: Path = ()) -> Iterator[tuple[Path, torch.Tensor]]:
    """``(path, tensor)`` for every tensor of the batch, in a fixed order."""
    if isinstance(batch, torch.Tensor):
        yield path, batch
    elif isinstance(batch, (tuple, list)):
        for i, item in enumerate(batch):
            yield from walk_tensors(item, (*path, i))
    elif isinstance(batch, Mapping):
        for key, item in batch.items():
            yield from walk_tensors(item, (*path, key))
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        for f in dataclasses.fields(batch):
            yield from walk_tensors(getattr(batch, f.name), (*path, f.name))


def iter_tensors(batch: Any) -> Iterator[torch.Tensor]:
    """The tensors of a batch, in ``walk_tensors``' order."""
    return (tensor for _, tensor in walk_tensors(batch))


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``batch`` rebuilt with ``fn`` applied to each tensor; containers keep their type and attributes."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(map_tensors(v, fn) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(map_tensors(v, fn) for v in batch)
    if isinstance(batch, MutableMapping):
        # A copy keeps the class, its attributes and a defaultdict's factory; then the items are replaced.
        out = copy.copy(batch)
        for key, item in batch.items():
            out[key] = map_tensors(item, fn)
        return out
    if isinstance(batch, Mapping):
        return type(batch)({k: map_tensors(v, fn) for k, v in batch.items()})  # type: ignore[call-arg]
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {f.name: map_tensors(getattr(batch, f.name), fn) for f in dataclasses.fields(batch) if f.init}
        return dataclasses.replace(batch, **changes)
    return batch
