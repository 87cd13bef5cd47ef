"""``self.log``'s fast path: taken while runner's strategy fits, logged values unchanged, Lightning's
method back afterwards."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultCollection, _ResultMetric

from runner.config.schema import Scope
from runner.lightning_step.log_fastpath import LogFastPath
from tests.helpers import fit_losses


def _logged_metric(on_epoch: bool) -> tuple[_ResultCollection, _ResultMetric]:
    results = _ResultCollection(training=True)
    results.log("training_step", "loss", torch.tensor(2.0), on_step=True, on_epoch=on_epoch, batch_size=4)
    return results, results["training_step.loss"]


def test_same_device_returns_the_metric_untouched_and_anything_else_runs_lightnings_method() -> None:
    fast = LogFastPath()
    fast.install()
    try:
        for on_epoch in (False, True):  # True: a mean with its cumulated_batch_size state
            _, metric = _logged_metric(on_epoch)
            meta, value = metric.meta, metric.value
            assert metric.to(torch.device("cpu")) is metric and metric.to("cpu") is metric
            assert metric.meta is meta and metric.value is value  # no walk: nothing was rebuilt
            metric.to(torch.float64)  # a dtype: Lightning's method casts
            assert metric.value.dtype == torch.float64
            metric.to("meta")  # another device: Lightning's method moves every state
            assert metric.value.device.type == "meta"
            if on_epoch:
                assert metric.cumulated_batch_size.device.type == "meta"
    finally:
        fast.restore()
    assert not LogFastPath.active()


def test_holders_nest_and_the_last_one_restores() -> None:
    a, b = LogFastPath(), LogFastPath()
    a.install()
    b.install()
    a.install()  # a second install by the same holder counts once
    a.restore()
    assert LogFastPath.active()
    b.restore()
    assert not LogFastPath.active()


class _Seen(Callback):
    def __init__(self) -> None:
        self.active: list[bool] = []
        self.logged: list[float] = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.active.append(LogFastPath.active())
        self.logged.append(float(trainer.callback_metrics["train/loss"]))


def test_a_fit_takes_the_fast_path_logs_the_same_values_and_restores() -> None:
    seen = _Seen()
    losses, _, _ = fit_losses(Scope.step, backend="eager", steps=6, callbacks=[seen])
    assert seen.active == [True] * 6
    assert seen.logged == losses  # what self.log recorded is each step's loss
    assert not LogFastPath.active()
