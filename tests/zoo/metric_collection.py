"""torchmetrics as the torchmetrics docs log them: a ``MetricCollection`` called in the step and its
batch values logged with ``log_dict``, a metric's returned batch value logged with ``self.log``, the
collection logged as objects in the validation loop, and ``compute()``/``reset()`` at epoch end."""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score


class MetricsModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))
        metrics = MetricCollection({
            "acc": MulticlassAccuracy(num_classes=classes),
            "f1": MulticlassF1Score(num_classes=classes, average="macro"),
        })
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.train_loss = MeanMetric()
        self.epoch_losses: list[float] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        batch_metrics = self.train_metrics(logits, y)
        self.log_dict(batch_metrics, on_step=True, on_epoch=False)
        running = self.train_loss(loss)
        self.log("train/loss_step", running, prog_bar=True)
        return loss

    def on_train_epoch_end(self) -> None:
        self.epoch_losses.append(float(self.train_loss.compute()))
        self.log_dict(self.train_metrics.compute())
        self.train_metrics.reset()
        self.train_loss.reset()

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.val_metrics.update(self.net(x), y)
        self.log_dict(self.val_metrics, on_step=False, on_epoch=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
