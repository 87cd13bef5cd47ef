"""Weight averaging callbacks of the training-tricks page: the page's ``EMAWeightAveraging``
(a ``WeightAveraging`` with ``avg_fn=get_ema_avg_fn()`` that starts after some steps) and
``StochasticWeightAveraging(swa_epoch_start=..., swa_lrs=0.01)``. The module is a plain classifier
with validation (the averaged weights are swapped in for every validation epoch)."""

from __future__ import annotations

from typing import Any

import torch
from lightning import LightningModule
from lightning.pytorch.callbacks import StochasticWeightAveraging, WeightAveraging
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import get_ema_avg_fn


class AveragedClassifier(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.model(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


# Enable Exponential Moving Average after 4 steps
class EMAWeightAveraging(WeightAveraging):
    def __init__(self) -> None:
        super().__init__(avg_fn=get_ema_avg_fn())

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        return (step_idx is not None) and (step_idx >= 4)


def ema_callbacks() -> list[Any]:
    """The page's EMA callback, fresh for each fit (it holds the averaged model)."""
    return [EMAWeightAveraging()]


def swa_callbacks() -> list[Any]:
    """Stochastic Weight Averaging from the second epoch with learning rate 0.01, fresh for each fit."""
    return [StochasticWeightAveraging(swa_epoch_start=1, swa_lrs=0.01)]
