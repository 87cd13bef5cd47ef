"""Learning-rate schedules from ``configure_optimizers`` as Lightning's optimization docs write them.

``OneCycleModule``: ``OneCycleLR`` sized with ``self.trainer.estimated_stepping_batches`` and stepped
every batch (``"interval": "step"``); ``training_step`` reads the current LR from
``self.trainer.optimizers[0].param_groups[0]["lr"]`` and logs it. ``StepLRModule``: the docs' dict with
``"interval": "epoch", "frequency": 1`` around a ``StepLR``.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class OneCycleModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, max_lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        self.log("train_loss", loss, prog_bar=True)
        self.log("lr", lr, prog_bar=True)
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.max_lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=self.hparams.max_lr, total_steps=self.trainer.estimated_stepping_batches
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class StepLRModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {
                "scheduler": scheduler,
                "interval": "epoch",  # "epoch" (default) or "step"
                "frequency": 1,  # how often to call scheduler.step(); default is 1
            },
        }
