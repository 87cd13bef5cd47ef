"""The zoo's idioms: what to build, how to train it, and what runner does with it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lightning as L

from tests.zoo.batchnorm_accumulate import ConvNet
from tests.zoo.classifier import MNISTLitModule
from tests.zoo.data import DigitsDataModule, VectorsDataModule
from tests.zoo.dict_output import ContrastiveModule
from tests.zoo.gan import GAN
from tests.zoo.logging_idioms import LoggingModule
from tests.zoo.metric_collection import MetricsModule
from tests.zoo.python_state import CurriculumModule
from tests.zoo.schedulers import FineTuneModule


@dataclass(frozen=True)
class Idiom:
    """One way users write a LightningModule, and what runner does with it."""

    name: str
    module: Callable[[], L.LightningModule]
    data: Callable[[], L.LightningDataModule]
    runner_does: str
    trainer_kwargs: dict[str, Any] = field(default_factory=dict)
    max_epochs: int = 3
    extra: Callable[[Any], dict[str, Any]] | None = None
    dropout: bool = False  # Inductor draws different dropout masks than eager (parity is statistical)


IDIOMS: dict[str, Idiom] = {i.name: i for i in [
    Idiom("metrics_template", MNISTLitModule, DigitsDataModule,
          "torchmetrics calls and self.log(metric) recorded in the graph, run eagerly after it, in order"),
    Idiom("metric_collection", MetricsModule, VectorsDataModule,
          "MetricCollection call and returned batch values deferred; log_dict resolves them after the step",
          extra=lambda m: {"epoch_losses": list(m.epoch_losses)}),
    Idiom("manual_gan", GAN, VectorsDataModule,
          "manual optimization: the submodules' forwards are compiled, the step's orchestration runs eagerly"),
    Idiom("schedulers", FineTuneModule, VectorsDataModule,
          "schedulers run by Lightning outside the step; the fused optimizer reads each new LR"),
    Idiom("logging", LoggingModule, VectorsDataModule,
          "log/log_dict with any option recorded in the graph, replayed through Lightning's log after it"),
    Idiom("python_state", CurriculumModule, VectorsDataModule,
          "fit-loop counters and batch_idx are dynamic graph inputs: no recompile per step, never stale"),
    Idiom("batchnorm_accumulate", ConvNet, DigitsDataModule,
          "BatchNorm buffers updated in the graph; accumulation and clipping stay Lightning's",
          trainer_kwargs={"accumulate_grad_batches": 2, "gradient_clip_val": 0.5}, dropout=True),
    Idiom("dict_output", ContrastiveModule, VectorsDataModule,
          "the step's dict of tensors is returned from the graph to on_train_batch_end as is",
          extra=lambda m: {"hard_examples": m.hard_examples, "embedding_norms": list(m.embedding_norms)}),
]}
