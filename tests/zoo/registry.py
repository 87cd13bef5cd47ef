"""The zoo's idioms: what to build, how to train it, and what runner does with it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, GradientAccumulationScheduler

from tests.zoo.averaging import AveragedClassifier, ema_callbacks, swa_callbacks
from tests.zoo.batchnorm_accumulate import ConvNet
from tests.zoo.classifier import MNISTLitModule
from tests.zoo.clipping import ClippedModule
from tests.zoo.data import DigitsDataModule, VectorsDataModule
from tests.zoo.dict_output import ContrastiveModule
from tests.zoo.epoch_outputs import DetachedOutputsModule, EpochOutputsModule
from tests.zoo.gan import GAN
from tests.zoo.histories import CounterModule, FloatHistoryModule, ItemHistoryModule
from tests.zoo.hooks import GradNormModule, HookLoggingModule
from tests.zoo.logging_idioms import LoggingModule
from tests.zoo.lr_schedules import OneCycleModule, StepLRModule
from tests.zoo.manual import ManualAccumulateClip, ManualLBFGS, SimpleGAN
from tests.zoo.metric_collection import MetricsModule
from tests.zoo.precision import BF16Module
from tests.zoo.printing import PrintingModule
from tests.zoo.python_state import CurriculumModule
from tests.zoo.schedulers import FineTuneModule
from tests.zoo.signatures import DataloaderIterModule, NoBatchIdxModule
from tests.zoo.trainer_flags import FlagsModule, ShouldStopModule


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
    dropout: bool = False  # random ops in the step: Inductor draws other numbers than eager unless fallback_random
    callbacks: Callable[[], list[Callback]] | None = None  # the idiom's own callbacks, built fresh for each fit
    test: bool = False  # trainer.test after fit (the test loop's metrics go to Trace.extra["test"])
    graph_breaks: str = ""
    """Why this idiom's step has a graph break no runner policy can lift (empty: it must have none)."""


def _accumulation_schedule() -> list[Callback]:
    return [GradientAccumulationScheduler(scheduling={0: 4, 1: 2, 2: 1})]


def _twelve_batches() -> L.LightningDataModule:
    """12 batches an epoch: a list that grows every step and is cleared each epoch passes the
    recompile limit (8) within the epoch, as it does on any real dataset."""
    return VectorsDataModule(train_size=192)


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
    # Lightning's documentation, page by page (issue 28): every idiom there that runs a training step.
    Idiom("epoch_outputs", EpochOutputsModule, _twelve_batches,
          "compiles once; each appended loss is replayed onto training_step_outputs after the graph, in order; "
          "the validation and test lists run eagerly", test=True),
    Idiom("epoch_outputs_detached", DetachedOutputsModule, _twelve_batches,
          "compiles once; append(loss.detach()) is replayed after the graph, in order (no len() guard)", test=True),
    Idiom("loss_history_float", FloatHistoryModule, VectorsDataModule,
          "compiles once; float(loss.detach()) is read after the graph and appended in order",
          extra=lambda m: {"losses": list(m.losses)}),
    Idiom("loss_history_item", ItemHistoryModule, VectorsDataModule,
          "compiles once; loss.item() is read after the graph and appended in order (no specialisation)",
          extra=lambda m: {"loss_history": list(m.loss_history)}),
    Idiom("step_counter", CounterModule, VectorsDataModule,
          "compiles once; self.training_step_invoked += 1 runs once per step, outside the graph's guards",
          extra=lambda m: {"training_step_invoked": m.training_step_invoked}),
    Idiom("onecycle_lr_read", OneCycleModule, VectorsDataModule,
          "compiles once; the LR read from trainer.optimizers is a graph input (OneCycleLR steps every batch), "
          "logged fresh each step"),
    Idiom("steplr_epoch", StepLRModule, VectorsDataModule,
          "compiles once; Lightning steps StepLR after each epoch outside the step; the optimizer reads each LR"),
    Idiom("hook_logging", HookLoggingModule, VectorsDataModule,
          "compiles the step once; self.log in every hook around it runs as Lightning runs it"),
    Idiom("grad_norm", GradNormModule, VectorsDataModule,
          "compiles the step once; grad_norm + log_dict in on_before_optimizer_step run eagerly on the grads"),
    Idiom("clip_value_accumulation_schedule", ClippedModule, VectorsDataModule,
          "compiles the step once; clipping by value (configure_gradient_clipping) and the changing accumulation "
          "stay Lightning's, outside the graph", callbacks=_accumulation_schedule),
    Idiom("manual_sequential_gan", SimpleGAN, VectorsDataModule,
          "manual optimization: G and D (plain nn.Sequential) are compiled as real frames; the step runs eagerly",
          dropout=True),
    Idiom("manual_accumulate_clip", ManualAccumulateClip, VectorsDataModule,
          "manual optimization: the nn.Sequential model is compiled; accumulation, clip_gradients and the "
          "scheduler run eagerly as written"),
    Idiom("manual_lbfgs_closure", ManualLBFGS, VectorsDataModule,
          "manual optimization: the model is compiled; LBFGS calls the closure (forward, backward) as often as "
          "it needs", max_epochs=2),
    Idiom("bf16_mixed", BF16Module, VectorsDataModule,
          "compiles once under Lightning's bf16 autocast; values match eager bf16 within bf16 rounding",
          trainer_kwargs={"precision": "bf16-mixed"}, max_epochs=2),
    Idiom("ema_weight_averaging", AveragedClassifier, VectorsDataModule,
          "compiles the step once; the EMA callback averages and swaps weights outside the graph, in place",
          callbacks=ema_callbacks),
    Idiom("swa", AveragedClassifier, VectorsDataModule,
          "compiles the step once; SWA's SWALR and averaging run outside the graph, in place",
          callbacks=swa_callbacks,
          graph_breaks="SWA's BatchNorm-update epoch sets momentum=None: torch's BatchNorm then divides by "
                       "float(num_batches_tracked), a data-dependent float it branches on (batchnorm.py)"),
    Idiom("self_print", PrintingModule, VectorsDataModule,
          "compiles once; self.print with the loss formatted in runs after the graph, in order, every 4th batch",
          graph_breaks="f'{loss:.4f}' formats the loss's value into a string inside the step: a host read "
                       "and Python string work no graph holds (self.print itself is deferred)"),
    Idiom("no_batch_idx", NoBatchIdxModule, VectorsDataModule,
          "training_step(self, batch) compiles once like (batch, batch_idx)"),
    Idiom("dataloader_iter", DataloaderIterModule, VectorsDataModule,
          "training_step(self, dataloader_iter): the batch fetch runs eagerly, the model's forward and loss compile "
          "once"),
    Idiom("loop_flags", FlagsModule, VectorsDataModule,
          "compiles the step once; limit_train_batches, val_check_interval mid-epoch (train/eval switches), sanity "
          "steps and deterministic algorithms change nothing in the graph",
          trainer_kwargs={"limit_train_batches": 6, "val_check_interval": 3, "num_sanity_val_steps": 1,
                          "log_every_n_steps": 2, "deterministic": True}, dropout=True),
    Idiom("debug_flags", FlagsModule, VectorsDataModule,
          "compiles the step once; detect_anomaly and the simple profiler wrap the compiled step as they wrap eager",
          trainer_kwargs={"detect_anomaly": True, "profiler": "simple"}, dropout=True, max_epochs=2),
    Idiom("should_stop", ShouldStopModule, VectorsDataModule,
          "compiles once; trainer.should_stop = True set in the step is applied after the graph, the fit stops "
          "where eager's does", trainer_kwargs={"min_epochs": 4}, max_epochs=8),
]}
