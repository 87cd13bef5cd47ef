"""Compile telemetry: what torch.compile did (frames, graphs, guards, recompiles, graph breaks,
compile time) and what it bought (eager vs compiled step time in the same run, throughput, MFU,
memory), logged to every Lightning logger and written to the run report: the console summary, ``report.md``
and ``report.json`` (``report``, its rows in ``definitions``, the verdict in ``verdict``), ``step_times.png``
(``plots``), what could not be compiled and the fix (``advice``), what the data module read (``data_report``),
and a sweep's ranking (``sweep``).

Public API: :class:`CompileTelemetry` (Lightning callback), :class:`CompileCollector`,
:func:`write_report`, :func:`format_summary`, :func:`summarize_sweep`, :class:`SweepSummary`.
Imported lazily, so ``runner.torch_internals`` and the Hydra sweep callback do not pull in
Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CompileTelemetry": "runner.telemetry.callback",
    "CompileCollector": "runner.telemetry.collector",
    "CompileProgress": "runner.stack.console",
    "write_report": "runner.telemetry.report",
    "format_summary": "runner.telemetry.report",
    "summarize_sweep": "runner.telemetry.sweep",
    "SweepSummary": "runner.telemetry.sweep",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runner.telemetry' has no attribute {name!r}")
