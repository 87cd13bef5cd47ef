"""``TrainModule``: trains any ``nn.Module`` that maps inputs to logits, with cross-entropy."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from runner.data.sequences.padding import IGNORE_INDEX
from runner.data.traits import ValMetric
from runner.training.loss import FULL_LOGITS, LossPlan, lm_loss

OptimizerFactory = Callable[..., Optimizer]
SchedulerFactory = Callable[[Optimizer], LRScheduler]


class TrainModule(L.LightningModule):
    """A model, a loss and an optimizer recipe. ``batch`` is ``(inputs, targets)``; ``val_metric`` is what
    validation reports beside its loss; ``loss`` how the loss is computed (``runner.training.loss.resolve_loss``;
    default: from the whole logits)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        weight_decay_min_dim: int = 2,
        val_metric: ValMetric = ValMetric.bits_per_byte,
        loss: LossPlan = FULL_LOGITS,
    ) -> None:
        super().__init__()
        # Train mode whatever the model was left in (from_pretrained returns eval mode, a user's module may be in
        # either): Lightning keeps the modes it finds, and switches to eval only around validation.
        self.model = model.train()
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.weight_decay_min_dim = weight_decay_min_dim
        self.val_metric = val_metric
        self.loss_plan = loss
        self.loss_fn = loss.loss_for(self.model)  # its output layer as the model holds it now (after peft)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = self.loss_fn(self.model, x, y)
        # Not prog_bar=True: Lightning turns every progress-bar value into a Python float after every
        # batch, a host sync per step. runner's progress bar shows train/loss, read at log steps only.
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        if self.val_metric is ValMetric.accuracy:  # the logits' argmax: a classifier's [batch, classes]
            logits = self.model(x)
            loss = lm_loss(logits, y)
            counted = y != IGNORE_INDEX
            right = ((logits.argmax(-1) == y) & counted).sum()
            self.log("val/accuracy", right / counted.sum().clamp(min=1), sync_dist=True)
        else:  # the loss alone: chunked where training is, never the whole logits then
            loss = self.loss_fn(self.model, x, y)
        self.log("val/loss", loss, prog_bar=True, sync_dist=True)
        if self.val_metric is ValMetric.bits_per_byte:  # nats per byte / ln 2 = bits per byte
            self.log("val/bpb", loss / math.log(2), sync_dist=True)
        return loss

    def configure_optimizers(self) -> Any:
        # Weight decay on matrices only (nanoGPT): norms, biases and 1-d params are left alone.
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= self.weight_decay_min_dim]
        no_decay = [p for p in params if p.dim() < self.weight_decay_min_dim]
        groups: list[dict[str, Any]] = [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
        optimizer = self.optimizer_factory([g for g in groups if g["params"]])
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
