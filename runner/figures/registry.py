"""Where a figure is defined: its key, what it means, and its label where a table shows it.

Every module of :mod:`runner.figures` defines its figures with :func:`define`, one constant per key,
named after the key (``perf/speedup_x`` -> ``PERF_SPEEDUP_X``). The constant is the key itself, a
plain ``str``: ``figures[PERF_SPEEDUP_X]`` reads a figure, and a misspelt name is an import error.
Figures dicts, ``report.json``, loggers and checkpoints see only the string, exactly as before.
The definitions stay here, so tables and docs read a figure's label and meaning by its key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KEY = re.compile(r"^[a-z]+(/[a-z0-9_]+)+$")
"""A figure's key: a namespace, a slash, a name with its unit (``compile/time_s``); per-rank figures
nest a figure's key under ``ranks/``."""


@dataclass(frozen=True)
class Figure:
    """One figure: its report key, its label in a table (empty for a figure no table shows) and what it
    measures."""

    key: str
    label: str
    meaning: str


_DEFINED: dict[str, Figure] = {}
"""Every figure defined so far, by key, in the order the modules of :mod:`runner.figures` define them."""


def define(key: str, meaning: str, label: str = "") -> str:
    """Define the figure ``key`` (once) with what it means, and ``label`` where a table shows it;
    returns ``key``, which the caller binds to the constant named after it."""
    if not KEY.match(key):
        raise ValueError(f"figure key {key!r} is not namespace/name_unit")
    if key in _DEFINED:
        raise ValueError(f"figure {key} is defined twice")
    if not meaning or "\n" in meaning:
        raise ValueError(f"figure {key}: its meaning is one line")
    _DEFINED[key] = Figure(key, label, meaning)
    return key


def figure(key: str) -> Figure:
    """The definition of ``key``; KeyError when runner reports no such figure."""
    return _DEFINED[key]


def defined() -> tuple[Figure, ...]:
    """Every figure, in the order the modules of :mod:`runner.figures` define them."""
    return tuple(_DEFINED.values())
