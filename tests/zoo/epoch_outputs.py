"""Epoch-end output lists, the replacement for ``training_epoch_end``/``validation_epoch_end`` that
Lightning 2's docs teach: each step appends to a list attribute, the epoch-end hook stacks, logs and
``.clear()``s it.

``EpochOutputsModule`` is the ``on_train_epoch_end`` docstring (``self.training_step_outputs.append(loss)``,
``torch.stack(...).mean()``, ``self.log``, ``.clear()``) with the validation and test lists of the
LightningModule page; ``DetachedOutputsModule`` appends ``loss.detach()`` as that page's pseudocode does.
"""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F


class EpochOutputsModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))
        self.training_step_outputs: list[torch.Tensor] = []
        self.validation_step_outputs: list[torch.Tensor] = []
        self.test_step_outputs: list[torch.Tensor] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.training_step_outputs.append(loss)
        return loss

    def on_train_epoch_end(self) -> None:
        # do something with all training_step outputs, for example:
        epoch_mean = torch.stack(self.training_step_outputs).mean()
        self.log("training_epoch_mean", epoch_mean)
        # free up the memory
        self.training_step_outputs.clear()

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        pred = self.model(x).argmax(-1)
        self.validation_step_outputs.append(pred)
        return pred

    def on_validation_epoch_end(self) -> None:
        all_preds = torch.stack(self.validation_step_outputs)
        self.log("val_pred_mean", all_preds.float().mean())
        self.validation_step_outputs.clear()  # free memory

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        pred = self.model(x).argmax(-1)
        self.test_step_outputs.append((pred == y).float().mean())
        return pred

    def on_test_epoch_end(self) -> None:
        self.log("test_acc", torch.stack(self.test_step_outputs).mean())
        self.test_step_outputs.clear()  # free memory

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class DetachedOutputsModule(EpochOutputsModule):
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.training_step_outputs.append(loss.detach())
        return loss
