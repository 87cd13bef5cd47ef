"""Gradient clipping and accumulation as the optimization and training-tricks pages configure them.

The optimization page's ``configure_gradient_clipping`` override: the clip value changes after some
epochs and Lightning clips through ``self.clip_gradients`` (by value). The page's example doubles the
Trainer's ``gradient_clip_val``, which Lightning 2.6 refuses ("Please use only one of them"), so the
value lives in the module's hyper-parameters and the Trainer's clipping flags stay unset. A
``GradientAccumulationScheduler`` accumulates 4, then 2, then 1 batches (the registry adds it).
"""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class ClippedModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 0.2, clip_val: float = 0.05,
                 stronger_after: int = 1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        gradient_clip_val = self.hparams.clip_val
        if self.current_epoch > self.hparams.stronger_after:
            gradient_clip_val = gradient_clip_val * 2

        # Lightning will handle the gradient clipping
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm="value")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
