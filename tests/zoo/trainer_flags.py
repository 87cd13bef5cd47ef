"""Trainer flags from the Trainer page that change how the step runs, and ``trainer.should_stop``.

``FlagsModule`` (BatchNorm and dropout, with validation) is trained by the registry under loop flags
(``limit_train_batches``, an integer ``val_check_interval``, ``num_sanity_val_steps``,
``log_every_n_steps``, ``deterministic``) and under debugging flags (``detect_anomaly``,
``profiler="simple"``). ``ShouldStopModule`` is the page's ``should_stop`` example: the step sets
``self.trainer.should_stop = True`` in a given epoch, with ``min_epochs`` deciding when it takes effect.
"""

from __future__ import annotations

import torch
from lightning import LightningModule
from torch import nn
from torch.nn import functional as F

from tests.zoo.plain import PlainClassifier


class FlagsModule(PlainClassifier):
    """The plain classifier with BatchNorm and dropout: train/eval switches the flags must not disturb."""

    def __init__(self) -> None:
        super().__init__(batchnorm=True, dropout=0.1)


class ShouldStopModule(LightningModule):
    def __init__(self, dim: int = 16, classes: int = 4, stop_epoch: int = 2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        # setting `trainer.should_stop` will stop training only after `min_epochs` have run
        if self.current_epoch == self.hparams.stop_epoch:
            self.trainer.should_stop = True
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)
