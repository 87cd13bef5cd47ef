"""Every figure runner reports, defined once beside its meaning, and the one protocol of whatever reports them.

A figure is a flat entry of the figures dict under a namespaced key with its unit (``compile/recompiles``,
``perf/speedup_x``). Each key is a constant of the module of its namespace, defined with what it means
(:mod:`runner.figures.registry`):

* ``run``: ``run/*``, ``train/*``, ``val/*``; ``data``: ``data/*``, what the run read; ``perf``; ``memory``;
* ``compile_plan``, ``compile_work``, ``compile_caches``, ``compile_background``: ``compile/*``, by what the
  figures are about (the plan, what compiling did, the caches, compile beside the run);
* ``cudagraphs``, ``dynamic``, ``offload``, ``reliability``, ``trace``, ``ranks``, ``tune``;
* ``eval_metrics``: ``eval/*`` (``runner eval``); ``peft``: ``peft/*``, what an adapter trains and holds; ``loss``:
  ``loss/*``, whether the loss was chunked;
* ``objective``: ``objective/*``, a preference objective's settings; ``rewards``, ``logps``: TRL's figures, and
  ``run_preference`` their ``val/`` twins.

The compile stack and its components, the telemetry callback and the reliability callbacks each
expose ``figures() -> dict``; ``run`` collects them from whatever it built, without knowing their types.
This package sits in the bottom layer, so every layer that writes or reads a figure imports its key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from runner.figures import (
    compile_background,
    compile_caches,
    compile_plan,
    compile_work,
    cudagraphs,
    data,
    dynamic,
    eval_metrics,
    logps,
    loss,
    memory,
    objective,
    offload,
    peft,
    perf,
    ranks,
    reliability,
    rewards,
    run,
    run_preference,
    trace,
    tune,
)
from runner.figures.registry import Figure, defined, figure

NAMESPACES = (run, data, perf, memory, compile_plan, compile_work, compile_caches, compile_background, cudagraphs,
              dynamic, offload, reliability, trace, ranks, tune, eval_metrics, peft, loss, objective, rewards, logps,
              run_preference)
"""The modules that define figures: importing this package imports them all, so :func:`defined` is complete."""

__all__ = ["NAMESPACES", "Figure", "ReportsFigures", "collect_figures", "counted", "defined", "figure"]


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


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and its noun, singular for one (``1 chunk``, ``8 chunks``): what a summary or log line counts."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"
