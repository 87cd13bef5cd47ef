"""Train a zoo idiom through a given strategy (or eager Lightning) and record everything to compare."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from tests.zoo.registry import Idiom


@dataclass
class Trace:
    """What one fit did, step by step: what the user would see and what the model ends as."""

    steps: list[dict[str, float]] = field(default_factory=list)  # loss, logged values, LRs, per step
    # callback_metrics and LRs at each epoch end, and once more at the end of fit (what the module's own
    # on_train_epoch_end hooks logged last: callbacks' epoch-end hooks run before the module's)
    epochs: list[dict[str, float]] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)  # wall time of each training batch
    state: dict[str, torch.Tensor] = field(default_factory=dict)  # final state_dict
    extra: dict[str, Any] = field(default_factory=dict)  # what the idiom reads off the module afterwards
    fit_s: float = 0.0

    def losses(self) -> list[float]:
        return [s["loss"] for s in self.steps if "loss" in s]


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()}


def _lrs(trainer: L.Trainer) -> dict[str, float]:
    return {f"lr/{i}.{j}": float(g["lr"]) for i, opt in enumerate(trainer.optimizers)
            for j, g in enumerate(opt.param_groups)}


class Recorder(Callback):
    """Records the loss, every logged value and every LR after each batch, and the epoch's metrics."""

    def __init__(self, trace: Trace, collector: Any = None) -> None:
        self.trace = trace
        self.collector = collector  # a CompileCollector: its events then carry the batch they happened in
        self._t0 = 0.0

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self.collector is not None:
            self.collector.step = len(self.trace.steps)
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.trace.step_s.append(time.perf_counter() - self._t0)
        step = _scalars(trainer.callback_metrics) | _lrs(trainer)
        if isinstance(outputs, dict) and isinstance(outputs.get("loss"), torch.Tensor):
            step["loss"] = float(outputs["loss"])
        self.trace.steps.append(step)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.trace.epochs.append(_scalars(trainer.callback_metrics) | _lrs(trainer))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.trace.epochs.append(_scalars(trainer.callback_metrics) | _lrs(trainer))


class FusedOptimizers(Callback):
    """Plain torch's switch to the fused kernel (``group["fused"] = True``) on every optimizer the module
    built: eager Lightning with the arithmetic ``compile.optimizer=fused`` runs, as a reference."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for opt in trainer.optimizers:
            for group in opt.param_groups:
                group.update(fused=True, foreach=False)


def fit(idiom: Idiom, strategy: Any = None, max_epochs: int | None = None, collector: Any = None,
        callbacks: tuple[Callback, ...] = (), fused: bool = False, **trainer_kwargs: Any) -> Trace:
    """Train ``idiom`` with ``strategy`` (None: eager Lightning on the CPU), seeded, and trace it.
    ``collector``: a started ``CompileCollector`` whose events get the batch number (0 = first step);
    ``callbacks`` run before the idiom's own callbacks and the recorder (a pacer's wait is not part of the
    step's time); ``fused``: eager Lightning's optimizers run torch's fused kernel (the reference for
    runner's fused policy). An idiom with ``test`` is then tested; its test metrics go to ``extra["test"]``."""
    # Lightning's info lines and its few-workers warning, off for this fit only: put back after it, so a
    # later test in the same process sees Lightning's logging as a fresh process does.
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        lightning_log.setLevel(logging.ERROR)
        try:
            return _fit(idiom, strategy, max_epochs, collector, callbacks, fused, **trainer_kwargs)
        finally:
            lightning_log.setLevel(level)


def _fit(idiom: Idiom, strategy: Any, max_epochs: int | None, collector: Any, callbacks: tuple[Callback, ...],
         fused: bool, **trainer_kwargs: Any) -> Trace:
    trace = Trace()
    L.seed_everything(0, verbose=False)
    module, data = idiom.module(), idiom.data()
    extra = [FusedOptimizers()] if fused else []
    kwargs: dict[str, Any] = dict(max_epochs=max_epochs or idiom.max_epochs, logger=False,
                                  enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                  callbacks=[*extra, *callbacks, *(idiom.callbacks() if idiom.callbacks else []),
                                             Recorder(trace, collector)])
    kwargs.update(idiom.trainer_kwargs)
    kwargs.update(trainer_kwargs)
    if strategy is None:
        kwargs["accelerator"] = "cpu"
    else:
        kwargs["strategy"] = strategy
    trainer = L.Trainer(**kwargs)
    t0 = time.perf_counter()
    trainer.fit(module, data)
    trace.fit_s = time.perf_counter() - t0
    trace.state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    trace.extra = idiom.extra(module) if idiom.extra else {}
    if idiom.test:
        trace.extra["test"] = [_scalars(m) for m in trainer.test(module, data, verbose=False)]
    return trace
