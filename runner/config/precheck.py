"""Validate the command line's config before Hydra creates a run directory.

Hydra writes ``outputs/<date>/<time>/.hydra`` before the task function runs; a bad key would leave
an empty run directory behind. ``precheck`` composes the same overrides with the compose API (the
same search path: the user's ``conf/``, ``recipes/`` and ``--config-dir`` first), converts and
validates them, and raises ``ConfigError`` with one paragraph that names the fix
(:mod:`runner.config.messages`).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from runner import hydra_internals
from runner.config.errors import ConfigError
from runner.config.load import compose, load
from runner.config.messages import explain

_SCHEMES = ("file://",)


def command_line(argv: Sequence[str]) -> argparse.Namespace | None:
    """The command line as Hydra parses it; None when Hydra will refuse it (and say why itself)."""
    args, unknown = hydra_internals.args_parser().parse_known_args(list(argv))
    return None if unknown else args


def search_dirs(args: argparse.Namespace) -> list[str]:
    """Directories given with ``--config-dir`` and ``hydra.searchpath=[...]`` (plain or ``file://``
    paths; ``pkg://`` entries are left to Hydra's own search path)."""
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


def _first_of_sweep(override: str) -> str:
    """``key=a,b`` -> ``key=a``: a multirun is checked on its first combination."""
    key, sep, value = override.partition("=")
    if not sep or value.startswith(("[", "{", "'", '"')) or "(" in value:
        return override
    return f"{key}={value.split(',')[0]}"


def _informational(args: argparse.Namespace) -> bool:
    """Hydra's flags that print something (or load another config) instead of running."""
    return bool(args.help or args.hydra_help or args.cfg or args.info or args.shell_completion
                or args.config_path or args.config_name or args.experimental_rerun)


def precheck(argv: Sequence[str]) -> None:
    """Compose, convert and validate; skipped for Hydra's informational flags (``--cfg job`` ...)."""
    args = command_line(argv)
    if args is None or _informational(args):
        return
    for d in search_dirs(args):
        if not Path(d).expanduser().is_dir():
            flag = "--config-dir" if d == args.config_dir else "hydra.searchpath"
            raise ConfigError(f"{flag} {d}: no such directory. Give a directory holding conf/<group>/ and "
                              "recipes/ (or Hydra's <group>/ layout), relative to the current directory "
                              f"({Path.cwd()}) or absolute.")
    overrides = [
        _first_of_sweep(a) for a in args.overrides if not a.lstrip("+~").startswith(("hydra.", "hydra/"))
    ]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            load(compose(overrides, run_dir=tmp))
    except ConfigError:
        raise
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(explain(e)) from e
