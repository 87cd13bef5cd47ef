"""Python state read inside ``training_step``: epoch, global step, trainer flags, hyper-parameters.

A curriculum the way users write one: the KL-style auxiliary weight ramps with ``self.global_step``,
label smoothing switches off after ``hparams.smooth_epochs`` epochs, the trainer's flags and limits are read
from ``self.trainer`` (Lightning issue #17933: under ``torch.compile``
such reads go stale or recompile every step).
"""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class CurriculumModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 0.05, ramp_steps: int = 10,
                 smooth_epochs: int = 1, smoothing: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(dim, 32), nn.Tanh(), nn.Linear(32, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        smoothing = self.hparams.smoothing if self.current_epoch < self.hparams.smooth_epochs else 0.0
        loss = F.cross_entropy(logits, y, label_smoothing=smoothing)
        ramp = min(1.0, self.global_step / self.hparams.ramp_steps)
        loss = loss + ramp * 1e-3 * logits.pow(2).mean()
        progress = (self.global_step + 1) / self.trainer.estimated_stepping_batches
        if self.trainer.training and not self.trainer.sanity_checking:
            self.log("train/loss", loss, prog_bar=True)
        self.log("train/progress", progress)
        self.log("train/seen_epoch", float(self.current_epoch))
        self.log("train/seen_step", float(self.global_step))
        self.log("train/seen_batch_idx", float(batch_idx + self.trainer.num_training_batches * self.current_epoch))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
