"""``runner [+recipe=NAME] [overrides]``, ``--list-recipes``, ``--help``, ``runner tune ...``, and
``runner export | eval | generate | resume RUN_DIR ...`` (:mod:`runner.after`).

Run from any directory: its ``conf/`` and ``recipes/`` come before runner's own and it is importable, so a project's
recipe can name its own classes. The config is validated before Hydra's entry point, so a mistake is one paragraph
and nothing (not even a run directory) is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from runner.config import CONF_DIR, ConfigError, load
from runner.config.composing.help_text import rendering_help
from runner.config.composing.hub_names import ASKED_ENV, pinned_overrides
from runner.config.composing.layers import config_dirs, recipe_listing, set_config_dirs
from runner.config.composing.precheck import command_line, precheck, search_dirs
from runner.config.composing.store import register_configs
from runner.quiet import quiet_third_party, short_console_lines

_LIST = "--list-recipes"
_AFTER = ("export", "eval", "generate")


def _list_recipes() -> None:
    """Every recipe, grouped by where it comes from (the project's first: they win)."""
    lines = recipe_listing()
    print("\n".join([*lines, "run one with: runner +recipe=NAME"]) if lines else "no recipes found")


def _make_importable(extra_roots: list[Path]) -> None:
    """The current directory (and --config-dir project roots) on ``sys.path``, as ``python -m`` has it, so a recipe's
    ``_target_`` may name the project's own classes (the console script starts with its bin/ there instead)."""
    for i, root in enumerate([Path.cwd(), *extra_roots]):
        if str(root) not in sys.path:
            sys.path.insert(0 if i == 0 else len(sys.path), str(root))


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> None:
    from runner.errors import RunStopped
    from runner.run import run

    try:
        with short_console_lines():  # inside the job: Hydra has set up its console and log-file handlers
            result = run(load(cfg))
    except RunStopped as e:  # a compile failure or a non-finite loss: the message says it all
        print(f"runner: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    if result.exit_code:  # stopped by SIGINT/SIGTERM after saving last.ckpt: 128+signum
        sys.exit(result.exit_code)


def main() -> None:
    with quiet_third_party():  # runner's own command line only; restored on the way out
        _main(sys.argv[1:])


def _main(argv: list[str]) -> None:
    args = command_line([a for a in argv if a != _LIST])
    set_config_dirs(search_dirs(args) if args is not None else [])
    _make_importable([d for d in config_dirs() if (d / "conf").is_dir() or (d / "recipes").is_dir()])
    if _LIST in argv:
        _list_recipes()
        return
    register_configs()
    if argv[:1] == ["tune"]:  # runner tune [+recipe=NAME] [overrides] [tune.KEY=VALUE]: runner.tune
        from runner.tune import main as tune_main

        sys.exit(tune_main(argv[1:]))
    if argv[:1] and argv[0] in _AFTER:  # runner export | eval | generate RUN_DIR ...: runner.after
        from runner.after.cli import main as after_main

        sys.exit(after_main(argv))
    from runner.after.resume import resume_command

    try:
        resumed = resume_command(argv)  # runner resume RUN_DIR [overrides]: the run's own command line, or None
        pins = precheck(resumed or argv)
    except ConfigError as e:
        print(f"runner: {e}", file=sys.stderr)
        sys.exit(2)
    if resumed is not None:  # the run's own command line, in place: Hydra's entry point reads it from sys.argv
        sys.argv = [sys.argv[0], *resumed]
    if pins:  # each Hub name at its commit: the job, its ranks and the saved command line read the same files
        pinned, asked = pinned_overrides(sys.argv[1:], pins)
        sys.argv = [sys.argv[0], *pinned]
        os.environ[ASKED_ENV] = json.dumps({**json.loads(os.environ.get(ASKED_ENV) or "{}"), **asked})
    with rendering_help() if {"--help", "-h"} & set(argv) else contextlib.nullcontext():
        _hydra_main()


if __name__ == "__main__":
    main()
