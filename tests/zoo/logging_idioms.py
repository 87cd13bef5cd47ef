"""Everything ``self.log`` offers inside ``training_step``: ``log_dict``, ``prog_bar``, ``sync_dist``,
``on_step``/``on_epoch`` reductions, ``reduce_fx``, an explicit ``batch_size``, plain Python numbers."""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class LoggingModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(dim, 32), nn.ReLU())
        self.classifier = nn.Linear(32, classes)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        h = self.encoder(x)
        logits = self.classifier(h)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(-1) == y).float().mean()
        self.log_dict({"train/loss": loss, "train/acc": acc}, prog_bar=True, on_step=True, on_epoch=True,
                      sync_dist=True)
        self.log("train/logit_max", logits.max(), on_step=False, on_epoch=True, reduce_fx="max")
        self.log("train/act_norm", h.norm(dim=-1).mean(), batch_size=x.shape[0], on_epoch=True)
        self.log("train/lr", self.hparams.lr, on_step=True)
        self.log_dict({"debug/zero_frac": (h == 0).float().mean(), "debug/batch_idx": float(batch_idx)})
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
