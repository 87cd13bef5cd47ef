"""``runner tune [+recipe=NAME] [overrides] [tune.KEY=VALUE ...]``: find the fastest compile stack for a recipe on
this machine (Optuna), and write it as a recipe."""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence
from pathlib import Path

from runner.config import ConfigError, compose
from runner.config.composing.loading import checked
from runner.config.composing.precheck import precheck
from runner.config.tune import load_tune, split_overrides


def main(argv: Sequence[str]) -> int:
    """Validate the run and the tune's config (nothing is written when either is refused), then tune."""
    run_overrides, tune_overrides = split_overrides(argv)
    if not any(o.lstrip("+").startswith("recipe=") for o in run_overrides):
        run_overrides = ["+recipe=quickstart", *run_overrides]  # the default job
    try:
        cfg = load_tune(tune_overrides)
        precheck(run_overrides)  # composes, converts and validates, naming the key and the fix
        base = checked(compose(run_overrides, run_dir="."))  # the trials, each a run, say the notes
    except ConfigError as e:
        print(f"runner: {e}", file=sys.stderr)
        return 2
    from runner.tune.study import tune

    now = datetime.datetime.now()  # tune.dir, else outputs/tune/<date>/<time>-<recipe>
    default = Path("outputs") / "tune" / now.strftime("%Y-%m-%d") / f"{now.strftime('%H-%M-%S')}-{base.recipe or 'run'}"
    summary = tune(run_overrides, cfg, Path(cfg.dir) if cfg.dir else default)
    return 0 if summary.get("winner") else 1
