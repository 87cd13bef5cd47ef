"""Validate the command line's config before Hydra creates a run directory (Hydra writes ``.hydra/`` before the task
runs, so a bad key would leave an empty one behind): the same overrides are composed on the same search path, converted
and validated, and a ``ConfigError`` names the fix. A run, each job of a ``-m`` sweep, ``--cfg``/``--info`` (converted
only: they print a config, valid or not) and ``runner tune`` all get the same paragraph."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from runner import hydra_internals
from runner.config.composing.hub_names import pins_of
from runner.config.composing.loading import checked, compose, convert
from runner.config.composing.messages import explain
from runner.config.composing.run_dirs import taken_error
from runner.config.errors import ConfigError

if TYPE_CHECKING:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from runner.hub import Pin

_SCHEMES = ("file://",)


def command_line(argv: Sequence[str]) -> argparse.Namespace | None:
    """The command line as Hydra parses it; None when Hydra will refuse it (and say why itself)."""
    args, unknown = hydra_internals.args_parser().parse_known_args(list(argv))
    return None if unknown else args


def search_dirs(args: argparse.Namespace) -> list[str]:
    """Directories given with ``--config-dir`` and ``hydra.searchpath=[...]`` (``pkg://`` entries are Hydra's own)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    dirs = [args.config_dir] if args.config_dir else []
    for override in args.overrides:
        if override.lstrip("+").split("=")[0] != "hydra.searchpath":
            continue
        try:
            value = OverridesParser.create().parse_overrides([override])[0].value()
        except HydraException:
            continue  # Hydra reports the malformed override itself
        for entry in value if isinstance(value, list) else []:
            entry = str(entry)
            if "://" not in entry or entry.startswith(_SCHEMES):
                dirs.append(entry.split("://", 1)[-1])
    return dirs


def _sweep(parser: OverridesParser, override: str) -> tuple[str, list[str]] | None:
    """``(key, values)`` of a sweep override; ``(override, [])`` for a plain one; None for a sweep only Hydra's loader
    can expand (``glob(...)`` over a group's options)."""
    try:
        parsed = parser.parse_overrides([override])[0]
    except HydraException:
        return override, []
    if not parsed.is_sweep_override():
        return override, []
    try:
        return parsed.get_key_element(), list(parsed.sweep_string_iterator())
    except HydraException:
        return None


def _jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override lists to check: each sweep at its first value and, under ``-m``, every other value once, so a
    misspelt later value is named as a plain run's would be (Hydra composes every job first and would stop with a
    traceback)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    sweeps = [s for o in overrides if (s := _sweep(parser, o)) is not None]
    first = [f"{key}={values[0]}" if values else key for key, values in sweeps]
    jobs = [first]
    if multirun:
        for i, (key, values) in enumerate(sweeps):
            jobs += [[*first[:i], f"{key}={value}", *first[i + 1:]] for value in values[1:]]
    return jobs


def precheck(argv: Sequence[str]) -> list[Pin]:
    """Compose, convert and validate every job ``argv`` runs (``--cfg`` and ``--info``: convert only); returns what the
    Hub names of every job resolved to."""
    args = command_line(argv)
    # Help, shell completion or another primary config: nothing of runner's to check.
    if args is None or any((args.help, args.hydra_help, args.shell_completion, args.config_path, args.config_name,
                            args.experimental_rerun)):
        return []
    informational = bool(args.cfg or args.info)  # they print the config (or facts about it) instead of running
    for d in search_dirs(args):
        if not Path(d).expanduser().is_dir():
            flag = "--config-dir" if d == args.config_dir else "hydra.searchpath"
            raise ConfigError(f"{flag} {d}: no such directory. Give a directory holding conf/<group>/ and "
                              "recipes/ (or Hydra's <group>/ layout), relative to the current directory "
                              f"({Path.cwd()}) or absolute.")
    if not informational and (taken := taken_error(args.overrides, bool(args.multirun))) is not None:
        raise ConfigError(taken)
    overrides = [a for a in args.overrides if not a.lstrip("+~").startswith(("hydra.", "hydra/"))]
    check = convert if informational else checked  # the job says the notes
    pins = []
    for job in _jobs(overrides, multirun=bool(args.multirun)):
        try:
            with tempfile.TemporaryDirectory() as tmp:
                pins += pins_of(check(compose(job, run_dir=tmp)))
        except ConfigError:
            raise
        except (HydraException, OmegaConfBaseException) as e:
            raise ConfigError(explain(e)) from e
    return pins
