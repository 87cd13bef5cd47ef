"""Validate the command line's config before Hydra creates a run directory.

Hydra writes ``outputs/<date>/<time>/.hydra`` before the task function runs; a bad key would leave
an empty run directory behind. ``precheck`` composes the same overrides with the compose API (the
same search path: the user's ``conf/``, ``recipes/`` and ``--config-dir`` first), converts and
validates them, and raises ``ConfigError`` with one paragraph that names the fix.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from runner.config.errors import ConfigError
from runner.config.load import compose, load

# Detail lines Hydra and OmegaConf append that say nothing to a user.
_NOISE = ("full_key:", "reference_type=", "object_type=", "Config search path", "provider=")
_SCHEMES = ("file://",)


def command_line(argv: Sequence[str]) -> argparse.Namespace | None:
    """The command line as Hydra parses it; None when Hydra will refuse it (and say why itself)."""
    from hydra._internal.utils import get_args_parser

    args, unknown = get_args_parser().parse_known_args(list(argv))
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


def _lines(e: BaseException) -> list[str]:
    parts: list[str] = []
    cause: BaseException | None = e
    while cause is not None:
        for line in str(cause).splitlines():
            line = " ".join(line.split())
            if line and line not in parts:
                parts.append(line)
        cause = cause.__cause__
    return parts


def _recipe_field(text: str) -> str | None:
    """A recipe that sets a field the selected group option has no schema field for."""
    m = re.search(r"In '(?:\+?recipe)/([^']+)'.*?Key '([^']+)' not in '([^']+)'.*?full_key: ([\w.]+)", text, re.S)
    if m is None:
        return None
    recipe, field, schema, full_key = m.groups()
    from runner.config.store import _TARGET_SCHEMAS

    group = full_key.split(".")[0]
    option, target = next(((o, getattr(s, "_target_", "?")) for o, s in _TARGET_SCHEMAS.get(group, {}).items()
                           if s.__name__ == schema), (schema, "?"))
    return (f"invalid configuration: recipe {recipe} sets {full_key}, but the selected {group} "
            f"({group}={option}: {target}) has no field {field}. A recipe that sets {group} fields must "
            f"select the {group} option they belong to (`override /{group}: NAME` in its defaults; put "
            f"sizes in a conf/{group}/NAME.yaml option), or drop {full_key} from the recipe; or choose a "
            f"{group} that has {field}.")


def explain(e: Exception) -> str:
    """Hydra's and OmegaConf's message in one paragraph, with the fix appended."""
    lines = _lines(e)
    if (special := _recipe_field("\n".join(lines))) is not None:
        return special
    msg = " ".join(ln for ln in lines if not ln.startswith(_NOISE))
    if "Missing mandatory value" in msg:
        key = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("full_key:")), "the key")
        fix = f"Give {key} a value on the command line ({key}=...) or in a recipe."
    elif (m := re.search(r"Interpolation key '([^']+)' not found", msg)) is not None:
        fix = (f"An option refers to {m.group(1)}, which the other selected options do not have: pick options "
               "that fit together (model=mlp goes with data=synthetic), or set the key.")
    elif "not in" in msg or "Key '" in msg:
        fix = ("Check the key's spelling; `runner --cfg job` prints every valid key, "
               "and `+key=value` adds a new one.")
    elif "Could not find" in msg or "Could not load" in msg:
        fix = ("Pick one of the available options listed above; `runner --list-recipes` lists recipes, "
               "`runner --help` every group's options.")
    elif "Value '" in msg or "Invalid value" in msg:
        fix = "Give a value of the type (or one of the choices) the schema declares; see runner/config/schema.py."
    else:
        fix = "Fix the override; `runner --cfg job` prints the composed config."
    return f"invalid configuration: {msg} {fix}"
