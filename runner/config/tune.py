"""``runner tune``'s own config: the ``tune.*`` keys (trial length, trial count, the loss tolerance against the eager
baseline, the compile-stack choices searched), typed and validated before any trial runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runner.config.errors import ConfigError
from runner.config.schema import CudaGraphMode, OffloadStrategy, OptimizerPolicy, Scope, ShapePolicy

PREFIX = "tune."
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true")


@dataclass
class TuneSpace:
    """The compile-stack choices searched; each list is the options of one choice."""

    # compile.scope (none is the eager baseline, always measured on its own).
    scope: list[Scope] = field(default_factory=lambda: [Scope.model, Scope.step, Scope.step_backward, Scope.blocks])
    # compile.optimizer (compiled compiles for ~2 min on a CPU: add it when the budget allows).
    optimizer: list[OptimizerPolicy] = field(default_factory=lambda: [OptimizerPolicy.none, OptimizerPolicy.fused])
    precision: list[str] = field(default_factory=lambda: ["32-true", "bf16-mixed"])  # trainer.precision.
    # dynamic.policy; searched only when batch shapes vary (per-document batches, your own data).
    shapes: list[ShapePolicy] = field(
        default_factory=lambda: [ShapePolicy.static, ShapePolicy.automatic, ShapePolicy.dynamic])
    # offload.strategy (cpu only on CUDA).
    offload: list[OffloadStrategy] = field(
        default_factory=lambda: [OffloadStrategy.none, OffloadStrategy.bf16, OffloadStrategy.checkpoint])
    # Inductor's cpp_wrapper option (compile.options.cpp_wrapper); searched only with Inductor.
    cpp_wrapper: list[bool] = field(default_factory=lambda: [False, True])
    # cudagraphs.mode; searched only on CUDA with Inductor.
    cudagraphs: list[CudaGraphMode] = field(
        default_factory=lambda: [CudaGraphMode.disabled, CudaGraphMode.reduce_overhead])


@dataclass
class TuneConfig:
    """How ``runner tune`` searches (``tune.KEY=VALUE`` on its command line)."""

    trials: int = 12  # Optuna trials, the default stack's included (the eager baseline runs before them).
    # Stop starting trials after this many seconds (None: run every trial); with the warm-up, the eager baseline and the
    # last trial, a quickstart tune on a 2-core CPU takes about 10 minutes.
    timeout_s: Optional[float] = 480.0
    steps: int = 30  # Training steps of each trial (and of the eager baseline).
    val_batches: int = 8  # Validation batches at the end of each trial: its val bits/byte is compared with eager's.
    # A trial whose val bits/byte is more than this above the eager baseline's is rejected.
    loss_tolerance: float = 0.05
    # Optuna's median pruner stops a trial slower than the median at the same step from this step on.
    prune_after_steps: int = 10
    seed: int = 0  # The sampler's seed.
    # The tune's directory (study.db, one run dir per trial, summaries); None: outputs/tune/<date>/<time>-<recipe>.
    dir: Optional[str] = None
    recipe_name: Optional[str] = None  # Name of the recipe written with the winning settings; None: <recipe>_tuned.
    # Where that recipe is written: your project's recipes directory (relative to the current one).
    recipe_dir: str = "recipes"
    space: TuneSpace = field(default_factory=TuneSpace)  # The choices searched.


def split_overrides(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(run overrides, ``tune.*`` overrides without the prefix)."""
    run = [a for a in args if not a.startswith(PREFIX)]
    tune = [a[len(PREFIX):] for a in args if a.startswith(PREFIX)]
    return run, tune


def load_tune(overrides: Sequence[str]) -> TuneConfig:
    """``tune.*`` overrides (without the prefix) on top of the defaults, typed and validated."""
    try:
        node = OmegaConf.merge(OmegaConf.structured(TuneConfig), OmegaConf.from_dotlist(list(overrides)))
        cfg = OmegaConf.to_object(node)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise ConfigError(
            f"tune.{key}: {str(e).splitlines()[0]}. runner tune takes tune.trials, tune.timeout_s, tune.steps, "
            "tune.val_batches, tune.loss_tolerance, tune.prune_after_steps, tune.seed, tune.dir, "
            "tune.recipe_name, tune.recipe_dir and tune.space.{scope,optimizer,precision,shapes,offload,"
            "cpp_wrapper,cudagraphs} (lists, e.g. tune.space.scope=[step,blocks]); fix the key or value."
        ) from e
    assert isinstance(cfg, TuneConfig)
    validate_tune(cfg)
    return cfg


def validate_tune(cfg: TuneConfig) -> None:
    """Refuse a tune that cannot work, before any trial runs."""
    if cfg.trials < 1:
        raise ConfigError(f"tune.trials={cfg.trials}: at least one trial (the default stack) must run; "
                          "set tune.trials=2 or more to search.")
    if cfg.steps < 4:
        raise ConfigError(f"tune.steps={cfg.steps}: a trial needs warm-up steps (compiles, then 2 quiet steps) "
                          "before its steady time per token is measured; set tune.steps=12 or more.")
    if cfg.prune_after_steps >= cfg.steps:
        raise ConfigError(f"tune.prune_after_steps={cfg.prune_after_steps} is not below tune.steps={cfg.steps}: "
                          "no trial could ever be pruned; set tune.prune_after_steps below tune.steps.")
    if cfg.loss_tolerance < 0 or cfg.val_batches < 1:
        raise ConfigError("tune.loss_tolerance must be >= 0 and tune.val_batches >= 1: the loss-parity check "
                          "compares each trial's val bits/byte with eager's; set e.g. tune.loss_tolerance=0.05.")
    unknown = [p for p in cfg.space.precision if p not in PRECISIONS]
    if unknown:
        raise ConfigError(f"tune.space.precision: {unknown} not among {list(PRECISIONS)}; "
                          "e.g. tune.space.precision=[32-true,bf16-mixed].")
    empty = [name for name in ("scope", "optimizer", "precision", "offload") if not getattr(cfg.space, name)]
    if empty:
        raise ConfigError(f"tune.space.{empty[0]} is empty: every searched choice needs at least one option "
                          f"(the recipe's own value is always added); e.g. tune.space.{empty[0]}=[...] with one value.")
