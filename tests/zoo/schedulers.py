"""Several LR schedulers from ``configure_optimizers``: per-group learning rates, a per-step warm-up,
and ``ReduceLROnPlateau`` monitoring a logged metric once per epoch (``interval: epoch``)."""

from __future__ import annotations

from typing import Any

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class FineTuneModule(LightningModule):
    """A "backbone + head" fine-tune: the backbone learns 10x slower than the head."""

    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 1e-2, warmup_steps: int = 6) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU())
        self.head = nn.Linear(32, classes)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.head(self.backbone(x)), y)
        self.log("train/loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.cross_entropy(self.head(self.backbone(x)), y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW([
            {"params": self.backbone.parameters(), "lr": self.hparams.lr / 10},
            {"params": self.head.parameters()},
        ], lr=self.hparams.lr, weight_decay=0.01)
        warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=self.hparams.warmup_steps)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0)
        return [optimizer], [
            {"scheduler": warmup, "interval": "step"},
            {"scheduler": plateau, "monitor": "val/loss", "interval": "epoch", "frequency": 1},
        ]
