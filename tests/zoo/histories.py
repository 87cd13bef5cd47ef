"""Python state the module keeps on itself in ``training_step``: a loss history as Python floats
(``float(loss.detach())`` or ``loss.item()``) and a call counter (``self.training_step_invoked += 1``),
read back after ``fit`` the way users plot or assert on them."""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class _Classifier(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class FloatHistoryModule(_Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.losses.append(float(loss.detach()))
        return loss


class ItemHistoryModule(_Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.loss_history: list[float] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.loss_history.append(loss.item())
        self.log("train_loss", loss)
        return loss


class CounterModule(_Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.training_step_invoked = 0

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.training_step_invoked += 1
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss)
        return loss
