"""Compile telemetry: what torch.compile did and what it bought, logged to every Lightning logger and written to
the run report. Imported lazily, so ``runner.torch_internals`` and the Hydra sweep callback do not pull in Lightning."""

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
