"""``run(cfg)``: one training run from a validated ``RunConfig`` to a ``RunResult``.

lightning-hydra-template's ``train.py`` is the model: build, fit, collect figures, report. Loggers
are closed in ``finally``, so an exception loses nothing already logged.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from runner.after.at_end import at_end_of_fit, push_at_end
from runner.after.source import inner_model
from runner.build import (
    build_callbacks,
    build_datamodule,
    build_loggers,
    build_module,
    build_strategy,
    build_trainer,
)
from runner.config.composing.hub_names import pins_of
from runner.config.paths import last_checkpoint_path
from runner.config.schema import RunConfig
from runner.data.resumable import make_resumable
from runner.metrics import TRAIN_METRICS, VAL_METRICS, collect_figures
from runner.peft import peft_figures
from runner.reliability import LogHistory, exit_code, flush_loggers
from runner.stack.errors.explain import CompileFailure
from runner.torch_internals import runtime
from runner.training.loss import LossPlan
from runner.training.preference import PreferenceModule

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


def run(cfg: RunConfig, extra_callbacks: Sequence[Callback] = ()) -> RunResult:
    """Train as configured and write the run's report into ``cfg.run_dir``. ``extra_callbacks`` run
    after runner's own (``runner tune``'s pruning reporter reads the telemetry's step times)."""
    from runner.telemetry.report import format_summary, write_report

    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    runtime.reset_compiler()  # multirun jobs share this process: each starts from a fresh Dynamo
    L.seed_everything(cfg.seed, workers=True)
    datamodule = build_datamodule(cfg)
    if hasattr(datamodule, "check"):
        datamodule.check()  # a missing data path fails here, before any model is built
    make_resumable(datamodule)  # mid-epoch resume continues at the same batch
    module = build_module(cfg)
    loggers = build_loggers(cfg)
    strategy = build_strategy(cfg)
    # Before any logger writes: a resumed run keeps the history its checkpoint covers, whatever killed it.
    history = LogHistory(loggers, resuming=bool(cfg.ckpt_path))
    callbacks = build_callbacks(cfg, history)
    for lg in loggers:
        lg.log_hyperparams(config_hparams(cfg))
    if cfg.eval.generate_every_n_steps:  # answers scored while training (runner.after.answers)
        from runner.after.answers import AnswersDuringTraining

        extra_callbacks = [*extra_callbacks, AnswersDuringTraining(cfg)]
    trainer = build_trainer(cfg, strategy, loggers, [*callbacks, *extra_callbacks])

    start = time.perf_counter()
    stopped = False
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path)
    except SIGTERMException:
        stopped = True  # SIGINT/SIGTERM: GracefulInterrupt saved last.ckpt at a step boundary
    except Exception as e:
        if (message := strategy.explain_compile_error(e)) is not None:  # the strategy answers for its stack
            raise CompileFailure(message) from e
        raise
    finally:
        flush_loggers(loggers, "success" if trainer.state.status.value == "finished" else "failed")
        history.close()

    ckpt = last_checkpoint_path(run_dir)
    figures = {
        **run_figures(cfg, trainer, module, time.perf_counter() - start),
        # The schedule says what a resume did to it (scheduler.on_resume), as the stack and callbacks report theirs.
        **collect_figures([strategy, *callbacks, *(c.scheduler for c in trainer.lr_scheduler_configs)]),
        "run/last_checkpoint": str(ckpt) if ckpt.exists() else None,
    }
    if pins := pins_of(cfg):
        figures["run/hub"] = [p.record() for p in pins]
    code = _interrupted(figures, ckpt) if stopped else 0
    if trainer.is_global_zero:
        if not stopped and trainer.state.status.value == "finished":  # the model out, and a causal LM's sample
            figures.update(at_end_of_fit(cfg, inner_model(module), run_dir, ckpt if ckpt.exists() else None,
                                         trainer.global_step))
        write_report(run_dir, figures)
        if pushed := push_at_end(cfg, run_dir, figures):  # after.push_to_hub, once report.json is whole
            figures.update(pushed)
            write_report(run_dir, figures)
        print(format_summary(figures, title=f"runner: {cfg.name}"))
    return RunResult(run_dir=run_dir, figures=figures, last_checkpoint=ckpt if ckpt.exists() else None,
                     exit_code=code)


def run_figures(cfg: RunConfig, trainer: L.Trainer, module: L.LightningModule, wall_s: float) -> dict[str, Any]:
    """What the run was and where it ended: steps, wall time, losses, device, precision. What it read (``data/*``):
    the data module's figures, through ``runner.telemetry.data_report.DataReport``."""

    def metric(key: str) -> float | None:
        value = trainer.callback_metrics.get(key)
        return None if value is None else float(value)

    figures: dict[str, Any] = {
        "run/name": cfg.name,
        "run/recipe": cfg.recipe,
        "run/steps": trainer.global_step,
        "run/wall_s": round(wall_s, 2),
        "run/params": sum(p.numel() for p in module.parameters()),
        "run/device": str(trainer.strategy.root_device),
        "run/precision": cfg.trainer.precision,
        "run/torch": torch.__version__,
        "train/loss": metric("train/loss"),
        "val/loss": metric("val/loss"),
    }
    # Whichever the module reports for its data (TrainModule.val_metric), and a preference objective's TRL figures.
    for key in ("val/bpb", "val/accuracy", *TRAIN_METRICS, *VAL_METRICS):
        if key in trainer.callback_metrics:
            figures[key] = metric(key)
    own = module.figures() if isinstance(module, PreferenceModule) else {}  # objective/*
    plan = getattr(module, "loss_plan", None)  # TrainModule's: loss/*, whole or chunked logits
    return {**figures, **own, **peft_figures(inner_model(module), trainer.optimizers),  # an adapter's peft/*
            **(plan.figures() if isinstance(plan, LossPlan) else {})}


def _interrupted(figures: dict[str, Any], ckpt: Path) -> int:
    """Say how to resume a SIGINT/SIGTERM stop; the exit code."""
    name = figures.get("run/interrupted_by")
    if name is None:
        return exit_code(signal.SIGTERM)  # Lightning's own SIGTERM handling, without a checkpoint
    log.warning("stopped by %s at step %s; checkpoint %s. Resume with python -m runner resume %s (or the same "
                "overrides plus hydra.run.dir=%s ckpt_path=last)", name, figures.get("run/interrupted_at_step"), ckpt,
                ckpt.parent.parent, ckpt.parent.parent)
    return exit_code(signal.Signals[name])
