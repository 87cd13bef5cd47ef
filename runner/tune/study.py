"""``runner tune``: the Optuna study. A warm-up run, the eager fp32 baseline, then trial 0 (the recipe's own stack)
and TPE's proposals, each a short run in this process; a trial whose val bits/byte is more than
``tune.loss_tolerance`` above eager's is infeasible. The study lives in ``<tune dir>/study.db``."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from runner.config import ConfigError, compose, load
from runner.config.composing.loading import checked
from runner.config.tune import TuneConfig
from runner.lightning_step.callback_group import find_callback
from runner.run import run
from runner.telemetry import CompileTelemetry
from runner.tune.output import TrialResult, TrialRow, write_outputs
from runner.tune.space import EAGER, current_values, param_overrides, resolve_space


def time_per_token_us(tokens_per_s: Any) -> float | None:
    positive = isinstance(tokens_per_s, (int, float)) and not isinstance(tokens_per_s, bool) and tokens_per_s > 0
    return 1e6 / float(tokens_per_s) if positive else None


class PruningReporter(pl.Callback):
    """Reports the running time per token to an Optuna trial each step; stops the run when pruned."""

    def __init__(self, trial: Any | None) -> None:
        super().__init__()
        self.trial = trial
        self.pruned_at: int | None = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        telemetry = find_callback(trainer, CompileTelemetry)
        if telemetry is None or not telemetry.meter.ran_compiled:
            return  # still warming up (compiling): nothing steady to report yet
        us = time_per_token_us(telemetry.meter.rate("tokens") or telemetry.meter.rate("samples"))
        if us is None or self.trial is None:
            return
        self.trial.report(us, trainer.global_step)
        if self.trial.should_prune():
            self.pruned_at = trainer.global_step
            trainer.should_stop = True


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
    compile_s = figures.get("compile/time_s")
    # A pruned run stops before its validation: the val/bpb it holds is the sanity check's, on the
    # untrained model (the same figure for every pruned trial), not this stack's.
    val_bpb = figures.get("val/bpb") if reporter.pruned_at is None else None
    return TrialResult(run_dir=run_dir, us_per_token=time_per_token_us(figures.get("perf/tokens_per_s")),
                       val_bpb=val_bpb, compile_s=compile_s if isinstance(compile_s, float) else None,
                       pruned_at=reporter.pruned_at, figures=figures)


def _say(text: str) -> None:
    print(f"tune: {text}", flush=True)


def tune(run_overrides: Sequence[str], cfg: TuneConfig, tune_dir: Path) -> dict[str, Any]:
    """Run the study; write the summaries and the winner's recipe; return the tune's summary dict."""
    try:
        import optuna
    except ImportError as e:  # an optional extra
        raise SystemExit("runner tune needs Optuna: pip install 'runner[tune]'") from e
    start = time.perf_counter()
    # Silent: each trial says the notes.
    base_cfg = checked(compose(list(run_overrides), run_dir=str(tune_dir / "base")))
    space = resolve_space(cfg.space, base_cfg)
    shared = [*run_overrides, *trial_overrides(cfg.steps, cfg.val_batches)]
    tune_dir.mkdir(parents=True, exist_ok=True)
    _say(f"searching {space.choices} in {tune_dir}")
    for name, why in space.dropped.items():
        _say(f"not searched: {name} ({why})")

    # The process's one-time start-up costs (Inductor's compile workers starting beside the run on a
    # 2-core CPU made ~15 s of steps 10-100x slower) land on this unrecorded warm-up, not on
    # the baseline; it also fills the compile caches with the default stack.
    with tempfile.TemporaryDirectory() as scratch:  # not one of the tune's runs: not in its summaries
        run_trial([*run_overrides, *trial_overrides(min(cfg.steps, 8), 1)], Path(scratch) / "warmup")
    eager_params = dict(EAGER)
    eager = run_trial([*shared, *param_overrides(eager_params)], tune_dir / "eager")
    rows = [TrialRow.of(-1, "eager", eager_params, eager, state="baseline")]
    _say(f"eager baseline: {rows[0].line()}")

    def objective(trial: Any) -> float:
        params = {name: trial.suggest_categorical(name, options) for name, options in space.choices.items()}
        name = "default" if trial.user_attrs.get("default_stack") else f"trial_{trial.number:03d}"
        result = run_trial([*shared, *param_overrides(params)], tune_dir / f"{trial.number:03d}-{name}", trial)
        state, reason, excess = judge(result, eager.val_bpb, cfg.loss_tolerance)
        if excess is not None:  # <= 0: within the loss tolerance of eager; TPE samples away from > 0
            trial.set_user_attr("bpb_excess", excess)
            trial.set_constraint("val_bpb_excess", excess)
        trial.set_user_attr("state", state)
        trial.set_user_attr("reason", reason)
        row = TrialRow.of(trial.number, name, params, result, state=state, reason=reason)
        rows.append(row)
        _say(f"trial {trial.number}: {row.line()}")
        if state in ("invalid", "pruned", "failed"):
            raise optuna.TrialPruned(reason)
        assert result.us_per_token is not None
        return result.us_per_token

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is ours; restored below
    try:
        # The loss-parity constraint is set on each trial (``Trial.set_constraint``, read by TPE).
        study = optuna.create_study(
            study_name=tune_dir.name, storage=f"sqlite:///{(tune_dir / 'study.db').resolve()}",
            sampler=optuna.samplers.TPESampler(seed=cfg.seed, n_startup_trials=3),
            pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=cfg.prune_after_steps),
            direction="minimize", load_if_exists=True)
        default = {k: v for k, v in current_values(base_cfg).items() if k in space.choices}
        study.enqueue_trial(default, user_attrs={"default_stack": True})
        study.optimize(objective, n_trials=cfg.trials, timeout=cfg.timeout_s, catch=())
    finally:
        optuna.logging.set_verbosity(verbosity)
    return write_outputs(study, rows, base_cfg, list(run_overrides), cfg, tune_dir, space,
                         wall_s=time.perf_counter() - start)


def judge(result: TrialResult, eager_bpb: float | None, tolerance: float) -> tuple[str, str, float | None]:
    """A finished trial's state (``complete``, ``rejected``, ``pruned``, ``invalid``, ``failed``), why,
    and how far its val bits/byte is beyond eager's plus the tolerance (> 0: rejected)."""
    if result.error is not None:
        return ("failed", result.error, None) if result.failed else ("invalid", result.error.split(". ")[0], None)
    if result.pruned_at is not None:
        return "pruned", f"slower than the median at step {result.pruned_at}", None
    if result.us_per_token is None:
        return "failed", "no steady step was timed", None
    if eager_bpb is None or result.val_bpb is None:
        return "complete", "", None
    excess = result.val_bpb - eager_bpb - tolerance
    if excess > 0:
        return "rejected", (f"val bits/byte {result.val_bpb:.4f} is {result.val_bpb - eager_bpb:+.4f} from eager's "
                            f"{eager_bpb:.4f}, beyond the tolerance {tolerance}"), excess
    return "complete", "", excess

