"""Weight averaging callbacks of the training-tricks page: the page's ``EMAWeightAveraging``
(a ``WeightAveraging`` with ``avg_fn=get_ema_avg_fn()`` that starts after some steps) and
``StochasticWeightAveraging(swa_epoch_start=..., swa_lrs=0.01)``. The module is a plain classifier
with validation (the averaged weights are swapped in for every validation epoch)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import StochasticWeightAveraging, WeightAveraging
from torch.optim.swa_utils import get_ema_avg_fn

from tests.zoo.plain import PlainClassifier


class AveragedClassifier(PlainClassifier):
    """The plain classifier with BatchNorm (SWA recomputes its statistics for the averaged weights)."""

    def __init__(self) -> None:
        super().__init__(batchnorm=True)


# Enable Exponential Moving Average after 4 steps
class EMAWeightAveraging(WeightAveraging):
    def __init__(self) -> None:
        super().__init__(avg_fn=get_ema_avg_fn())

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        return (step_idx is not None) and (step_idx >= 4)


def ema_callbacks() -> list[Any]:
    """The page's EMA callback, fresh for each fit (it holds the averaged model)."""
    return [EMAWeightAveraging()]


def swa_callbacks() -> list[Any]:
    """Stochastic Weight Averaging from the second epoch with learning rate 0.01, fresh for each fit."""
    return [StochasticWeightAveraging(swa_epoch_start=1, swa_lrs=0.01)]
