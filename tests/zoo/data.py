"""Synthetic, seeded data in the shape users feed these modules (MNIST-like images, vectors)."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


def _images(n: int, seed: int) -> TensorDataset:
    """``n`` 1x12x12 "digits": each class is a fixed random template plus noise."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(10, 1, 12, 12, generator=torch.Generator().manual_seed(1234))
    y = torch.randint(0, 10, (n,), generator=g)
    x = templates[y] + 0.8 * torch.randn(n, 1, 12, 12, generator=g)
    return TensorDataset(x, y)


class DigitsDataModule(L.LightningDataModule):
    """lightning-hydra-template's MNISTDataModule, shrunk: train/val splits, shuffled train loader."""

    def __init__(self, batch_size: int = 16, train_size: int = 128, val_size: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.data_train: Any = None
        self.data_val: Any = None

    def setup(self, stage: str | None = None) -> None:
        if self.data_train is None:
            self.data_train = _images(self.hparams.train_size, seed=1)
            self.data_val = _images(self.hparams.val_size, seed=2)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data_train, batch_size=self.hparams.batch_size, shuffle=True,
                          generator=torch.Generator().manual_seed(0))

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data_val, batch_size=self.hparams.batch_size, shuffle=False)


class VectorsDataModule(L.LightningDataModule):
    """Vectors of ``dim`` features and ``classes`` labels (a linear rule plus noise)."""

    def __init__(self, dim: int = 16, classes: int = 4, batch_size: int = 16, train_size: int = 128,
                 val_size: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)

    def _split(self, n: int, seed: int) -> TensorDataset:
        g = torch.Generator().manual_seed(seed)
        w = torch.randn(self.hparams.dim, self.hparams.classes, generator=torch.Generator().manual_seed(99))
        x = torch.randn(n, self.hparams.dim, generator=g)
        y = (x @ w + 0.5 * torch.randn(n, self.hparams.classes, generator=g)).argmax(-1)
        return TensorDataset(x, y)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self._split(self.hparams.train_size, 1), batch_size=self.hparams.batch_size, shuffle=True,
                          generator=torch.Generator().manual_seed(0))

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self._split(self.hparams.val_size, 2), batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self._split(self.hparams.val_size, 3), batch_size=self.hparams.batch_size)
