"""Validate the command line's config before Hydra creates a run directory.

Hydra writes ``outputs/<date>/<time>/.hydra`` before the task function runs; a bad key would leave
an empty run directory behind. ``precheck`` composes the same overrides with the compose API,
converts and validates them, and raises ``ConfigError`` with one paragraph that names the fix.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from runner.config.load import ConfigError, compose, load

_HYDRA_FLAGS = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
                "--resolve", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                "--config-dir", "-cd", "--experimental-rerun")


# Detail lines Hydra and OmegaConf append that say nothing to a user.
_NOISE = ("full_key:", "reference_type=", "object_type=", "Config search path", "provider=")


def _first_of_sweep(override: str) -> str:
    """``key=a,b`` -> ``key=a``: a multirun is checked on its first combination."""
    key, sep, value = override.partition("=")
    if not sep or value.startswith(("[", "{", "'", '"')) or "(" in value:
        return override
    return f"{key}={value.split(',')[0]}"


def precheck(argv: Sequence[str]) -> None:
    """Compose, convert and validate; skipped for Hydra's informational flags (``--cfg job`` ...)."""
    if any(a.split("=")[0] in _HYDRA_FLAGS for a in argv):
        return
    overrides = [
        _first_of_sweep(a) for a in argv
        if not a.startswith("-") and not a.lstrip("+~").startswith(("hydra.", "hydra/"))
    ]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            load(compose(overrides, run_dir=tmp))
    except ConfigError:
        raise
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(explain(e)) from e


def explain(e: Exception) -> str:
    """Hydra's and OmegaConf's message, with the fix appended."""
    parts: list[str] = []
    cause: BaseException | None = e
    while cause is not None:
        for line in str(cause).splitlines():
            line = " ".join(line.split())
            if line and not line.startswith(_NOISE) and line not in parts:
                parts.append(line)
        cause = cause.__cause__
    msg = " ".join(parts)
    if "not in" in msg or "Key '" in msg:
        fix = ("Check the key's spelling; `python -m runner --cfg job` prints every valid key, "
               "and `+key=value` adds a new one.")
    elif "Could not find" in msg or "Could not load" in msg:
        fix = "Pick one of the available options listed above; `python -m runner --list-recipes` lists recipes."
    elif "Value '" in msg or "Invalid value" in msg:
        fix = "Give a value of the type (or one of the choices) the schema declares; see runner/config/schema.py."
    else:
        fix = "Fix the override; `python -m runner --cfg job` prints the composed config."
    return f"invalid configuration: {msg} {fix}"
