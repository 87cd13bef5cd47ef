"""The one protocol every object that reports figures implements.

The compile stack and its components, the telemetry callback and the reliability callbacks each
expose ``figures() -> dict`` (namespaced keys with units, e.g. ``compile/recompiles``); ``run``
collects them from whatever it built, without knowing their types.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class ReportsFigures(Protocol):
    """Anything with ``figures()``: flat, namespaced figures for loggers and the run report."""

    def figures(self) -> dict[str, Any]: ...


def collect_figures(sources: Iterable[object]) -> dict[str, Any]:
    """Merge the figures of every source that reports any, in order (later keys win)."""
    out: dict[str, Any] = {}
    for source in sources:
        if isinstance(source, ReportsFigures):
            out.update(source.figures())
    return out
