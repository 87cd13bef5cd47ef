"""One tuning trial: a short run in this process, its steady time per token, and Optuna's pruning during it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from runner.config import ConfigError, compose, load
from runner.figures.compile_work import COMPILE_TIME_S
from runner.figures.perf import PERF_TOKENS_PER_S
from runner.figures.run import VAL_BPB
from runner.run import run
from runner.telemetry import CompileTelemetry
from runner.training.callback_group import find_callback


def time_per_token_us(tokens_per_s: Any) -> float | None:
    """Microseconds per token from a tokens/s figure (None when there is none)."""
    if isinstance(tokens_per_s, (int, float)) and not isinstance(tokens_per_s, bool) and tokens_per_s > 0:
        return 1e6 / float(tokens_per_s)
    return None


class PruningReporter(pl.Callback):
    """Reports the running time per token to an Optuna trial each step; stops the run when pruned."""

    def __init__(self, trial: Any | None) -> None:
        super().__init__()
        self.trial = trial
        self.pruned_at: int | None = None
        self.last_us: float | None = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """Report this step's running figure; ask the pruner."""
        telemetry = find_callback(trainer, CompileTelemetry)
        if telemetry is None or not telemetry.meter.ran_compiled:
            return  # still warming up (compiling): nothing steady to report yet
        us = time_per_token_us(telemetry.meter.rate("tokens") or telemetry.meter.rate("samples"))
        if us is None or self.trial is None:
            return
        self.last_us = us
        self.trial.report(us, trainer.global_step)
        if self.trial.should_prune():
            self.pruned_at = trainer.global_step
            trainer.should_stop = True


@dataclass
class TrialResult:
    """What one trial measured; ``error`` is set when its config was refused."""

    run_dir: Path
    us_per_token: float | None = None
    val_bpb: float | None = None
    compile_s: float | None = None
    pruned_at: int | None = None
    figures: dict[str, Any] | None = None
    error: str | None = None
    failed: bool = False  # The run raised (``error`` says what); else ``error`` is a refused config.


def trial_overrides(steps: int, val_batches: int) -> list[str]:
    """What makes a run a short trial: ``steps`` steps, one validation at the end, no eager pairs, checkpoints or
    progress bar."""
    return [f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps}",
            f"trainer.limit_val_batches={val_batches}", f"trainer.checkpoint_every_n_steps={steps}",
            "trainer.enable_progress_bar=false", "telemetry.speedup_steps=0", "offload.measure=false",
            "reliability.save_cache_artifacts=false", "compile.background=disabled"]


def run_trial(overrides: list[str], run_dir: Path, trial: Any | None = None) -> TrialResult:
    """Compose, validate and train one trial in this process (compile caches on disk are shared)."""
    try:
        cfg = load(compose(overrides, run_dir=str(run_dir)))
    except ConfigError as e:
        return TrialResult(run_dir=run_dir, error=str(e))
    reporter = PruningReporter(trial)
    try:
        result = run(cfg, extra_callbacks=[reporter])
    except Exception as e:  # noqa: BLE001 - a stack that fails (compile error, non-finite loss) loses its trial only
        first = (str(e).splitlines() or [""])[0]
        return TrialResult(run_dir=run_dir, error=f"the run failed: {type(e).__name__}: {first}"[:300], failed=True)
    figures = result.figures
    compile_s = figures.get(COMPILE_TIME_S)
    # A pruned run stops before its validation: the val/bpb it holds is the sanity check's, on the
    # untrained model (the same figure for every pruned trial), not this stack's.
    val_bpb = figures.get(VAL_BPB) if reporter.pruned_at is None else None
    return TrialResult(run_dir=run_dir, us_per_token=time_per_token_us(figures.get(PERF_TOKENS_PER_S)),
                       val_bpb=val_bpb, compile_s=compile_s if isinstance(compile_s, float) else None,
                       pruned_at=reporter.pruned_at, figures=figures)
