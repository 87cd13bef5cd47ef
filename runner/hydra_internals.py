"""Every private Hydra thing runner touches, one function each, imported inside it, so a Hydra refactor breaks one test
in ``tests/test_hydra_internals.py`` and the feature that uses it, never ``import runner``. Pinned against hydra-core
1.3.8."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hydra.plugins.config_source import ConfigSource


def args_parser() -> argparse.ArgumentParser:
    """The parser ``@hydra.main`` reads ``sys.argv`` with (its flags, then the overrides)."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def file_config_source(provider: str, path: str) -> ConfigSource:
    """Hydra's own ``file://`` config source for the directory ``path``."""
    from hydra._internal.core_plugins.file_config_source import FileConfigSource

    return FileConfigSource(provider=provider, path=f"file://{path}")


def locate(dotted: str) -> Any:
    """The object a ``_target_`` names, imported the way ``hydra.utils.instantiate`` imports it
    (``hydra.utils.get_object`` does the same but also logs the failure)."""
    from hydra._internal.utils import _locate

    return _locate(dotted)


_APPEND_HINT = "To append to your config use +"


def refused_override(message: str) -> str | None:
    """The override Hydra's "Could not override" error quotes in its hint to append it with ``+``; None without one."""
    for line in message.splitlines():
        if line.strip().startswith(_APPEND_HINT):
            return line.strip()[len(_APPEND_HINT):]
    return None


def jobs_override(master: Any, override: str) -> None:
    """Make every job of a multirun read ``override``: the launcher composes each job again from the master config's
    ``hydra.overrides.hydra``, so a value set on the master config alone (a claimed sweep directory) would not reach
    them."""
    from omegaconf import read_write

    with read_write(master.hydra):
        master.hydra.overrides.hydra.append(override)
