"""Builders: typed config in, plain objects out (model, data, loggers, strategy, trainer); each turns one node into
constructor arguments (torchtune's rule), so no config tree is threaded past this module."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger
from omegaconf import OmegaConf
from torch import nn

from runner.config.paths import artifacts_path, checkpoint_dir, resolve_artifacts_path
from runner.config.schema import RunConfig
from runner.config.schema.data import Batching
from runner.config.schema.objective import Reference as ReferenceSource
from runner.config.schema.objective import resolve_reference
from runner.config.target_objects import declared, fields, locate
from runner.data.traits import DataTraits, ValMetric
from runner.lightning_step.callback_group import CallbackGroup
from runner.peft import apply_peft
from runner.quiet import quiet_wandb
from runner.reliability import AtomicCheckpointIO, build_reliability_callbacks
from runner.stack import CacheArtifacts
from runner.stack.dynamic.policy import resolve_bounds, resolve_pad_to
from runner.strategy import CompileStrategy, ConsolidatedCheckpoint, DDPCompileStrategy, FSDPCompileStrategy
from runner.telemetry.advice import Batches
from runner.training.loss import resolve_loss
from runner.training.module import TrainModule
from runner.training.preference import PreferenceModule
from runner.training.progress_bar import RunProgressBar
from runner.training.reference import AdapterReference, FrozenCopy, Precomputed, Reference
from runner.training.summary import RunModelSummary


def data_traits(cfg: RunConfig) -> DataTraits:
    """What the data module's batches are, as its class declares (``traits``; ``DataTraits()`` for a user's own)."""
    traits = declared(cfg.data, "traits")
    return traits if isinstance(traits, DataTraits) else DataTraits()


def batches_of(cfg: RunConfig) -> Batches:
    """What the run's batches are, for the telemetry's advice on a recompile of a new shape (padded per batch, and
    whether ``data.packing=true`` could be turned on)."""
    packing = getattr(cfg.data, "packing", None)
    can_pack = packing is False and getattr(cfg.data, "batching", None) in (None, Batching.documents) and \
        callable(getattr(locate(str(getattr(cfg.model, "_target_", "")))[0], "packing_refusal", None)) and \
        declared(cfg.model, "packing_refusal") is None
    return Batches(pads_per_batch=data_traits(cfg).pads_per_batch, can_pack=can_pack)


def build_datamodule(cfg: RunConfig) -> L.LightningDataModule:
    """The data module; one that pads per batch gets the shape policy's padding rule."""
    extra: dict[str, Any] = {}
    if data_traits(cfg).pads_per_batch:
        extra["pad_to"] = resolve_pad_to(cfg.dynamic, cfg.data.seq_len)  # type: ignore[union-attr]
    # the schema's fields that are the data module's arguments (not a Hub data set's config and split)
    return instantiate(OmegaConf.create(fields(cfg.data), flags={"allow_objects": True}), **extra)


def build_module(cfg: RunConfig) -> L.LightningModule:
    """The LightningModule: the user's own, or ``TrainModule`` around any ``nn.Module``, adapted per ``cfg.peft``."""
    model = instantiate(cfg.model)
    if isinstance(model, L.LightningModule):
        return model
    if not isinstance(model, nn.Module):
        raise TypeError(f"model._target_={cfg.model._target_} built a {type(model).__name__}, not an nn.Module")
    loss = resolve_loss(model, cfg.loss, cfg.peft, fields(cfg.data), data_traits(cfg))  # before peft: the check's rule
    adapter = apply_peft(model, cfg.peft)
    optimizer = instantiate(cfg.optimizer)
    scheduler = instantiate(cfg.scheduler) if cfg.scheduler else None
    if cfg.objective.loss.preference:
        return PreferenceModule(model, optimizer, cfg.objective, build_reference(cfg, model, adapter is not None),
                                scheduler=scheduler, loss=loss)
    return TrainModule(model, optimizer=optimizer, scheduler=scheduler, val_metric=val_metric(cfg), loss=loss)


def build_reference(cfg: RunConfig, model: nn.Module, adapted: bool) -> Reference:
    """Where the objective's reference log-probabilities come from (``objective.reference``; docs/preference.md)."""
    kind = resolve_reference(cfg.objective, adapted, bool(cfg.peft.path))
    if kind is None:
        return Reference()
    if kind is ReferenceSource.base:
        return AdapterReference(model)
    if kind is ReferenceSource.copy:
        return FrozenCopy(model)
    return Precomputed(model, cfg.trainer.precision, cfg.objective.cache_dir,
                       base_only=adapted and not cfg.peft.path)


def val_metric(cfg: RunConfig) -> ValMetric:
    """What validation reports beside its loss, as the data module declares it."""
    return data_traits(cfg).val_metric


def build_loggers(cfg: RunConfig) -> list[Logger]:
    """Every configured logger; CSV is always on."""
    loggers = [instantiate(node) for node in cfg.logger.values()]
    for lg in loggers:
        quiet_wandb(lg)  # wandb's own end-of-run tables and a false warning, not its files
    if not any(isinstance(lg, CSVLogger) for lg in loggers):
        loggers.insert(0, CSVLogger(save_dir=cfg.run_dir, name="csv", version=""))
    return loggers


def build_strategy(cfg: RunConfig) -> CompileStrategy | DDPCompileStrategy | FSDPCompileStrategy:
    """Single device; FSDP2 when ``trainer.distributed=fsdp``; else DDP for more than one device or node."""
    t = cfg.trainer
    seq_len = getattr(cfg.data, "seq_len", None)
    dynamic = resolve_bounds(cfg.dynamic, seq_len if isinstance(seq_len, int) else None)
    if not shapes_vary(cfg):
        # Ranks agree on dynamic dims only when shapes can differ: with fixed shapes the agreement would
        # be pure cost (torch's guard collectives: an all-gather per compiled-frame entry, every step).
        dynamic = dataclasses.replace(dynamic, compiler_collectives=False)
    backend = "gloo" if t.accelerator == "cpu" else None
    r = cfg.reliability
    artifacts = CacheArtifacts(
        save_to=artifacts_path(cfg.run_dir) if r.save_cache_artifacts else None,
        load_from=resolve_artifacts_path(r.load_cache_artifacts) if r.load_cache_artifacts else None)
    # console=False: runner's telemetry prints compile progress and the summary table itself.
    stack: dict[str, Any] = dict(compile=cfg.compile, dynamic=dynamic, offload=cfg.offload, cudagraphs=cfg.cudagraphs,
                                 artifacts=artifacts, console=False)
    if t.sharded:
        return FSDPCompileStrategy(**stack, reshard_after_forward=t.fsdp.reshard_after_forward,
                                   mixed_precision=t.fsdp.mixed_precision,
                                   save_distributed_checkpoint=t.fsdp.distributed_checkpoint,
                                   process_group_backend=backend)
    if t.is_distributed():
        return DDPCompileStrategy(**stack, process_group_backend=backend)
    return CompileStrategy(**stack, device=t.single_device())


def shapes_vary(cfg: RunConfig) -> bool:
    """Whether batch shapes can change between steps or ranks, as the data module declares it."""
    return data_traits(cfg).shapes_vary


def build_callbacks(cfg: RunConfig, *more: Callback) -> list[Callback]:
    """Checkpoints (``last.ckpt``), the summary, the bar and runner's own callbacks as one ``CallbackGroup``."""
    from runner.data.fingerprint import of_node
    from runner.telemetry import CompileTelemetry
    from runner.telemetry.data_report import DataReport

    ckpt_dir = checkpoint_dir(cfg.run_dir)
    data = DataReport(Path(cfg.run_dir), of_node(cfg.data), resuming=bool(cfg.ckpt_path))
    own = CallbackGroup(LearningRateMonitor(logging_interval="step"),
                        CompileTelemetry(cfg.telemetry, Path(cfg.run_dir), batches=batches_of(cfg)), data,
                        *build_reliability_callbacks(cfg), *more)
    callbacks: list[Callback] = [
        ModelCheckpoint(dirpath=ckpt_dir, save_last=True, save_top_k=0,
                        every_n_train_steps=cfg.trainer.checkpoint_every_n_steps),
        own,
        RunModelSummary(),  # Lightning's summary without its "FLOPs: 0" column
    ]
    if cfg.trainer.sharded and cfg.trainer.fsdp.consolidate:
        callbacks.append(ConsolidatedCheckpoint(ckpt_dir / "consolidated.pt"))
    if cfg.trainer.enable_progress_bar:  # Lightning refuses a progress-bar callback when bars are off
        callbacks.append(RunProgressBar())
    return callbacks


def build_trainer(cfg: RunConfig, strategy: Any, loggers: list[Logger], callbacks: list[Callback]) -> L.Trainer:
    t = cfg.trainer
    kwargs: dict[str, Any] = dict(  # precision: a string the schema checked (Lightning's type is a Literal)
        accelerator=t.accelerator, devices=t.devices, num_nodes=t.num_nodes, strategy=strategy, precision=t.precision,
        max_steps=t.max_steps, max_time=t.max_time, val_check_interval=t.val_check_interval,
        check_val_every_n_epoch=None, limit_val_batches=t.limit_val_batches, log_every_n_steps=t.log_every_n_steps,
        gradient_clip_val=t.gradient_clip_val, accumulate_grad_batches=t.accumulate_grad_batches,
        enable_progress_bar=t.enable_progress_bar, deterministic=t.deterministic, logger=loggers, callbacks=callbacks,
        default_root_dir=cfg.run_dir, enable_model_summary=True,
        plugins=[AtomicCheckpointIO()],  # last.ckpt is never half-written (runner.reliability.checkpoint_io)
    )
    return L.Trainer(**kwargs)
