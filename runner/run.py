"""``run(cfg)``: one training run from a validated ``RunConfig`` to a ``RunResult``.

The data path: build (model, data, loggers, strategy, trainer) -> ``Trainer.fit`` -> figures from
the trainer, the compile stack and telemetry -> ``report.json`` / ``report.md`` + printed summary.
Loggers are closed in ``finally``, so an exception loses nothing already logged.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch

from runner.build import (
    build_callbacks,
    build_datamodule,
    build_loggers,
    build_module,
    build_strategy,
    build_trainer,
)
from runner.config.schema import RunConfig

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What a run produced: its directory, its figures (as in ``report.json``), its last checkpoint."""

    run_dir: Path
    figures: dict[str, Any] = field(default_factory=dict)
    last_checkpoint: Path | None = None


def _metric(trainer: L.Trainer, key: str) -> float | None:
    value = trainer.callback_metrics.get(key)
    return None if value is None else float(value)


def run(cfg: RunConfig) -> RunResult:
    """Train as configured and write the run's report into ``cfg.run_dir``."""
    from runner.telemetry import CompileTelemetry
    from runner.telemetry.report import format_summary, write_report

    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    L.seed_everything(cfg.seed, workers=True)
    datamodule = build_datamodule(cfg)
    if hasattr(datamodule, "check"):
        datamodule.check()  # a missing data path fails here, before any model is built
    module = build_module(cfg)
    loggers = build_loggers(cfg)
    strategy = build_strategy(cfg)
    callbacks = build_callbacks(cfg)
    trainer = build_trainer(cfg, strategy, loggers, callbacks)

    start = time.perf_counter()
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path)
    finally:
        for lg in loggers:
            lg.finalize("success" if trainer.state.status.value == "finished" else "failed")

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
    for cb in callbacks:
        if isinstance(cb, CompileTelemetry):
            figures.update(cb.figures())
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    figures["run/last_checkpoint"] = str(ckpt) if ckpt.exists() else None
    if trainer.is_global_zero:
        write_report(run_dir, figures)
        print(format_summary(figures, title=f"runner: {cfg.name}"))
    return RunResult(run_dir=run_dir, figures=figures, last_checkpoint=ckpt if ckpt.exists() else None)
