"""A training ``DataLoader`` that resumes mid-epoch at the exact batch it stopped at."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

log = logging.getLogger(__name__)


class _SkipFirst:
    """A batch sampler that leaves out the first ``n`` batches of ``inner`` (lengths unchanged: Lightning sized the
    epoch from the full loader, and its counters resume at ``n``)."""

    def __init__(self, inner: Iterable[Any], n: int) -> None:
        self.inner, self.n = inner, n

    def __iter__(self) -> Iterator[Any]:
        # One-shot: with persistent workers the same index sampler is iterated again next epoch.
        n, self.n = self.n, 0
        return itertools.islice(iter(self.inner), n, None)

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]


def _generator(loader: DataLoader) -> torch.Generator | None:
    """The generator that draws the epoch's order (and the workers' base seed)."""
    sampler_gen = getattr(loader.sampler, "generator", None)
    return loader.generator if loader.generator is not None else sampler_gen


class ResumableDataLoader(DataLoader):
    """A ``DataLoader`` with ``state_dict``/``load_state_dict``."""

    _epoch_gen_state: torch.Tensor | None = None
    _yielded: int = 0
    _skip: int = 0

    @property
    def _index_sampler(self) -> Any:  # type: ignore[override]
        inner = super()._index_sampler
        return _SkipFirst(inner, self._skip) if self._skip else inner

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        gen = _generator(self)
        skip = self._skip
        # Snapshot before the base iterator draws anything from the generator (seed, permutation).
        self._epoch_gen_state = gen.get_state() if gen is not None else None
        self._yielded = skip
        base = super().__iter__()
        self._skip = 0  # the base iterator has taken its (skipping) index sampler
        for batch in base:
            self._yielded += 1
            if self._yielded >= len(self):
                # Exhaust the epoch before handing out its last batch: RandomSampler draws once more
                # from the generator when it runs out, and a checkpoint taken after this batch must
                # hold the generator state the next epoch starts from.
                for _ in base:
                    pass
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """Where in the epoch's order the next batch comes from."""
        gen = _generator(self)
        return {
            "epoch_gen_state": self._epoch_gen_state,
            "gen_state": gen.get_state() if gen is not None else None,
            "yielded": self._yielded,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at batch ``yielded`` of the epoch; a finished epoch resumes at the next one."""
        gen = _generator(self)
        yielded = int(state.get("yielded", 0))
        finished = yielded >= len(self)
        key = "gen_state" if finished else "epoch_gen_state"
        if gen is not None and state.get(key) is not None:
            gen.set_state(state[key])
        elif yielded and gen is None:
            log.warning("data: the train loader has no generator; resumed batches follow a new shuffle order")
        self._skip = 0 if finished else yielded


def as_resumable(loader: Any) -> Any:
    """The same loader, made resumable; anything that is not a plain ``DataLoader`` is returned as is."""
    if type(loader) is DataLoader:
        loader.__class__ = ResumableDataLoader
    elif not isinstance(loader, ResumableDataLoader):
        log.info("data: %s is not a torch DataLoader; mid-epoch resume depends on it", type(loader).__name__)
    return loader


def make_resumable(datamodule: L.LightningDataModule) -> L.LightningDataModule:
    """Make the datamodule's train loaders resumable (instance-level wrap of ``train_dataloader``)."""
    original = datamodule.train_dataloader

    def train_dataloader() -> Any:
        loaders = original()
        if isinstance(loaders, dict):
            return {k: as_resumable(v) for k, v in loaders.items()}
        if isinstance(loaders, (list, tuple)):
            return type(loaders)(as_resumable(v) for v in loaders)
        return as_resumable(loaders)

    datamodule.train_dataloader = train_dataloader  # type: ignore[method-assign]
    return datamodule
