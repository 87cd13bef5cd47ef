"""``run(cfg)``: one training run from a validated ``RunConfig`` to a ``RunResult``.

The data path: build (model, data, loggers, strategy, trainer) -> ``Trainer.fit`` -> figures from
the trainer, the compile stack and telemetry -> ``report.json`` / ``report.md`` + printed summary.
Loggers are closed in ``finally``, so an exception loses nothing already logged.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from runner.build import (
    build_callbacks,
    build_datamodule,
    build_loggers,
    build_module,
    build_strategy,
    build_trainer,
)
from runner.config.schema import OffloadStrategy, RunConfig
from runner.reliability import (
    CompileCacheArtifacts,
    CompileErrorCallback,
    CompileFailure,
    GracefulInterrupt,
    NonFiniteGuard,
    exit_code,
    explain_compile_error,
    flush_loggers,
    make_resumable,
)
from runner.reliability.csv_history import CsvHistory
from runner.training.module import TrainModule, lm_loss

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What a run produced: its directory, its figures (as in ``report.json``), its last checkpoint."""

    run_dir: Path
    figures: dict[str, Any] = field(default_factory=dict)
    last_checkpoint: Path | None = None
    exit_code: int = 0
    """0, or 128+signum when SIGINT/SIGTERM stopped the run (``last.ckpt`` holds its state)."""


def config_hparams(cfg: RunConfig) -> dict[str, Any]:
    """The run's whole typed config as plain values (enums by value, nested dicts), for every logger's
    hyperparameters: wandb's dashboard and TensorBoard's HParams tab group a sweep's runs by them."""

    def plain(value: Any) -> Any:
        if isinstance(value, Enum):
            return value.value
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    return {k: plain(v) for k, v in dataclasses.asdict(cfg).items() if k not in ("logger", "run_dir")}


def _metric(trainer: L.Trainer, key: str) -> float | None:
    value = trainer.callback_metrics.get(key)
    return None if value is None else float(value)


def measure_saved_activations(cfg: RunConfig, module: L.LightningModule,
                              datamodule: L.LightningDataModule) -> dict[str, Any]:
    """Saved-activation bytes and gradient error of the offload strategy against ``none``, measured
    eagerly on one validation batch (the training order stays untouched) before anything is
    transformed. Only for ``TrainModule``, whose loss runner knows."""
    if cfg.offload.strategy is OffloadStrategy.none or not cfg.offload.measure or not isinstance(module, TrainModule):
        return {}
    from runner.offload import measure_offload

    datamodule.setup("fit")
    batch = next(iter(datamodule.val_dataloader()))
    return measure_offload(module.model, batch, lambda m, b: lm_loss(m(b[0]), b[1]), cfg.offload)


def run(cfg: RunConfig) -> RunResult:
    """Train as configured and write the run's report into ``cfg.run_dir``."""
    from runner.telemetry import CompileTelemetry
    from runner.telemetry.report import format_summary, write_report

    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # Hydra's multirun runs its jobs one after another in this process. Dynamo's caches, per-frame
    # automatic-dynamic decisions and recompile counts are per process and keyed by code object (every
    # job's training_step is the same one): without a reset, job 2 "recompiles" job 1's graph and a
    # long sweep exhausts the recompile limit, silently falling back to eager.
    torch._dynamo.reset()
    L.seed_everything(cfg.seed, workers=True)
    datamodule = build_datamodule(cfg)
    if hasattr(datamodule, "check"):
        datamodule.check()  # a missing data path fails here, before any model is built
    make_resumable(datamodule)  # mid-epoch resume continues at the same batch
    module = build_module(cfg)
    offload_figures = measure_saved_activations(cfg, module, datamodule)
    loggers = build_loggers(cfg)
    strategy = build_strategy(cfg)
    callbacks = build_callbacks(cfg)
    history = CsvHistory(loggers)  # a resumed run keeps the rows logged before the interruption
    if cfg.ckpt_path:
        history.stash()
    # After the stash: the CSV logger's writer, created by its first write, clears its directory.
    hparams = config_hparams(cfg)
    for lg in loggers:
        lg.log_hyperparams(hparams)
    callbacks.append(history)
    trainer = build_trainer(cfg, strategy, loggers, callbacks)

    start = time.perf_counter()
    stopped = False
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path)
    except SIGTERMException:
        stopped = True  # SIGINT/SIGTERM: GracefulInterrupt saved last.ckpt at a step boundary
    except Exception as e:
        watch = next((cb.watch for cb in callbacks if isinstance(cb, CompileErrorCallback)), None)
        if (message := explain_compile_error(e, watch)) is not None:
            raise CompileFailure(message) from e
        raise
    finally:
        flush_loggers(loggers, "success" if trainer.state.status.value == "finished" else "failed")
        history.restore()

    figures: dict[str, Any] = {
        "run/name": cfg.name,
        "run/recipe": cfg.recipe,
        "run/steps": trainer.global_step,
        "run/wall_s": round(time.perf_counter() - start, 2),
        "run/params": sum(p.numel() for p in module.parameters()),
        "run/device": str(strategy.root_device),
        "run/precision": cfg.trainer.precision,
        "run/torch": torch.__version__,
        "train/loss": _metric(trainer, "train/loss"),
        "val/loss": _metric(trainer, "val/loss"),
        "val/bpb": _metric(trainer, "val/bpb"),
    }
    unigram = getattr(datamodule, "unigram_bits", None)
    if unigram is not None:
        figures["data/unigram_bpb"] = round(unigram, 4)
    figures.update(strategy.stack.summary())
    figures.update(offload_figures)
    for cb in callbacks:
        if isinstance(cb, CompileTelemetry):
            figures.update(cb.figures())
    for cb in callbacks:
        if isinstance(cb, (CompileErrorCallback, CompileCacheArtifacts, NonFiniteGuard)):
            figures.update(cb.figures())
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    figures["run/last_checkpoint"] = str(ckpt) if ckpt.exists() else None
    code = _interrupted(callbacks, figures, ckpt) if stopped else 0
    if trainer.is_global_zero:
        write_report(run_dir, figures)
        print(format_summary(figures, title=f"runner: {cfg.name}"))
    return RunResult(run_dir=run_dir, figures=figures, last_checkpoint=ckpt if ckpt.exists() else None,
                     exit_code=code)


def _interrupted(callbacks: list[Any], figures: dict[str, Any], ckpt: Path) -> int:
    """Record a SIGINT/SIGTERM stop in the figures and say how to resume; the exit code."""
    grace = next((cb for cb in callbacks if isinstance(cb, GracefulInterrupt)), None)
    if grace is None or grace.signum is None:
        return exit_code(signal.SIGTERM)  # Lightning's own SIGTERM handling, without a checkpoint
    figures["run/interrupted_by"] = signal.Signals(grace.signum).name
    figures["run/interrupted_at_step"] = grace.step
    log.warning("stopped by %s at step %s; checkpoint %s. Resume with the same overrides plus "
                "hydra.run.dir=%s ckpt_path=last", figures["run/interrupted_by"], grace.step, ckpt,
                ckpt.parent.parent)
    return exit_code(grace.signum)
