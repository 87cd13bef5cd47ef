"""``self.print`` in the step: Lightning's rank-zero ``print``, here every few batches with the loss
formatted into the message (``f"{loss:.4f}"`` reads the tensor's value)."""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class PrintingModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, every: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        if batch_idx % self.hparams.every == 0:
            self.print(f"epoch {self.current_epoch} batch {batch_idx}: loss {loss:.4f}")
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)
