"""``training_step`` signatures other than ``(batch, batch_idx)`` that Lightning's docs show.

``NoBatchIdxModule``: ``def training_step(self, batch)`` (the compile page's example).
``DataloaderIterModule``: ``def training_step(self, dataloader_iter)`` fetching
``batch, batch_idx, dataloader_idx = next(dataloader_iter)`` itself (the 2.0 upgrade guide), with the
``batch_size`` that ``self.log`` then needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class NoBatchIdxModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class DataloaderIterModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))

    def training_step(self, dataloader_iter: Iterator[Any]) -> torch.Tensor:
        batch, batch_idx, dataloader_idx = next(dataloader_iter)
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss, batch_size=x.shape[0])
        self.log("batch_idx", float(batch_idx), batch_size=x.shape[0])
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)
