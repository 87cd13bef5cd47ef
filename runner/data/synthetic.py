"""Synthetic classification: Gaussian inputs labelled by a fixed random teacher network, so a model can actually learn
it (the loss falls), generated in memory from a seed."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from runner.data.sequences.padding import seeded_loader
from runner.data.summary import SplitData
from runner.data.traits import CLASSES, DataTraits


class SyntheticDataModule(SplitData):
    """``num_samples`` samples; the first ``val_fraction`` of them validate, the rest train."""

    def __init__(self, in_features: int = 32, num_classes: int = 10, num_samples: int = 4096, batch_size: int = 64,
                 val_fraction: float = 0.1, seed: int = 0, num_workers: int = 0) -> None:
        super().__init__()
        self.in_features, self.num_classes = in_features, num_classes
        self.num_samples, self.batch_size, self.seed = num_samples, batch_size, seed
        self.val_fraction, self.num_workers = val_fraction, num_workers
        self._train: TensorDataset | None = None
        self._val: TensorDataset | None = None

    @staticmethod
    def traits(**_: Any) -> DataTraits:
        """Accuracy; every batch the same shape."""
        return CLASSES

    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(self.seed)
        x = torch.randn(self.num_samples, self.in_features, generator=g)
        teacher = torch.randn(self.in_features, self.num_classes, generator=g)
        y = (torch.tanh(x) @ teacher).argmax(dim=1)
        n_val = int(self.num_samples * self.val_fraction)  # 0.1 of 4096: 409, as num_samples // 10 gave
        self._val = TensorDataset(x[:n_val], y[:n_val])
        self._train = TensorDataset(x[n_val:], y[n_val:])

    def _loader(self, ds: TensorDataset, shuffle: bool) -> DataLoader:
        return seeded_loader(ds, self.batch_size, self.seed, self.num_workers, shuffle)
