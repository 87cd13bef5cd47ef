"""The plain classifier of the idioms whose subject is a Trainer flag or a callback, not the step: an MLP
trained with cross-entropy and validated, each loss logged with ``self.log``, SGD with momentum."""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class PlainClassifier(LightningModule):
    """``Linear(dim, 32)``, optional ``BatchNorm1d``, ``ReLU``, optional ``Dropout``, ``Linear(32, classes)``."""

    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 0.05, batchnorm: bool = False,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 32), *([nn.BatchNorm1d(32)] if batchnorm else []), nn.ReLU(),
                                   *([nn.Dropout(dropout)] if dropout else []), nn.Linear(32, classes))

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
