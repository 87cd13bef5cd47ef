"""Logging from the hooks around the step, as Lightning's logging page tabulates them.

``HookLoggingModule`` logs from ``on_train_start``, ``on_train_epoch_start``, ``on_train_batch_start``,
``on_before_backward``, ``on_after_backward``, ``on_before_zero_grad``, ``on_train_batch_end`` (the step's
output) and ``on_train_epoch_end``, with the LightningModule page's
``self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, logger=True)`` in the step.
``GradNormModule`` is the debugging page's ``grad_norm(self.layer, norm_type=2)`` logged with
``self.log_dict`` in ``on_before_optimizer_step``.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning import LightningModule
from lightning.pytorch.utilities import grad_norm
from torch import nn
from torch.nn import functional as F


class HookLoggingModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))

    def on_train_start(self) -> None:
        self.log("params", float(sum(p.numel() for p in self.parameters())))

    def on_train_epoch_start(self) -> None:
        self.log("epoch_start_weight_norm", self.model[0].weight.norm())

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        x, _ = batch
        self.log("input_mean", x.mean())

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, logger=True)
        return loss

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.log("loss_before_backward", loss)

    def on_after_backward(self) -> None:
        self.log("last_layer_grad_norm", self.model[2].weight.grad.norm())

    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        self.log("first_layer_weight_mean", self.model[0].weight.mean())

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.log("outputs_loss", outputs["loss"])

    def on_train_epoch_end(self) -> None:
        self.log("epoch_end_weight_norm", self.model[0].weight.norm())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class GradNormModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Sequential(nn.Linear(dim, 32), nn.Tanh(), nn.Linear(32, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # Compute the 2-norm for each layer
        # If using mixed precision, the gradients are already unscaled here
        norms = grad_norm(self.layer, norm_type=2)
        self.log_dict(norms)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
