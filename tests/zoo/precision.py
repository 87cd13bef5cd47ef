"""``Trainer(precision="bf16-mixed")``: the step runs under ``torch.autocast`` with bfloat16 on the CPU
(the precision page's "BFloat16 Mixed Precision"). Kept tiny: CPUs without bfloat16 units emulate it."""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class BF16Module(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))

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
