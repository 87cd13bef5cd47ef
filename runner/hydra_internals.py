"""Every private Hydra thing runner touches, one function each: the bottom layer.

Hydra's public API covers composing, plugins and errors; three things runner needs are private:
the command-line parser Hydra's entry point uses (to check a command line before Hydra writes a run
directory), the file config source (runner's search-path sources read files through it), and the
importer ``instantiate`` uses for ``_target_``. Each is imported here, inside the function that
needs it, so a Hydra refactor breaks one named test in ``tests/test_hydra_internals.py`` and the
feature that uses it, never ``import runner``. No other runner module names ``hydra._internal``.

Pinned against hydra-core 1.3.8.
"""

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
    """The override (``key=value``, as typed) that Hydra's "Could not override" error quotes in its
    hint to append it with ``+``; None when ``message`` has no such hint."""
    for line in message.splitlines():
        if line.strip().startswith(_APPEND_HINT):
            return line.strip()[len(_APPEND_HINT):]
    return None


def jobs_override(master: Any, override: str) -> None:
    """Make every job of a multirun read ``override``: the launcher composes each job's config again from the
    master config's ``hydra.overrides.hydra`` (``ConfigLoaderImpl.load_sweep_config``), so a value set on the master
    config alone (a claimed sweep directory) would not reach the jobs."""
    from omegaconf import read_write

    with read_write(master.hydra):
        master.hydra.overrides.hydra.append(override)
