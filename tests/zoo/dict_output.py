"""A ``training_step`` returning a dict with extra tensors, consumed in ``on_train_batch_end``."""

from __future__ import annotations

from typing import Any

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class ContrastiveModule(LightningModule):
    """An embedding model; the step returns its embeddings and logits for a running hard-example count."""

    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Sequential(nn.Linear(dim, 32), nn.SiLU(), nn.Linear(32, 8))
        self.head = nn.Linear(8, classes)
        self.hard_examples = 0
        self.embedding_norms: list[float] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> dict[str, Any]:
        x, y = batch
        z = self.embed(x)
        logits = self.head(z)
        loss = F.cross_entropy(logits, y)
        self.log("train/loss", loss)
        return {"loss": loss, "embeddings": z.detach(), "logits": logits.detach(), "targets": y}

    def on_train_batch_end(self, outputs: dict[str, Any], batch: Any, batch_idx: int) -> None:
        probs = outputs["logits"].softmax(-1)
        confidence = probs.gather(1, outputs["targets"][:, None]).squeeze(1)
        self.hard_examples += int((confidence < 0.5).sum())
        self.embedding_norms.append(float(outputs["embeddings"].norm(dim=-1).mean()))
        self.log("train/hard_examples", float(self.hard_examples))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
