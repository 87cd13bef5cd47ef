"""Compile telemetry: what torch.compile did and what it bought, logged to every Lightning logger and written to
the run report. ``CompileTelemetry`` is imported lazily, so ``runner.torch_internals`` and the Hydra sweep callback
do not pull in Lightning."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "CompileTelemetry":
        from runner.telemetry.callback import CompileTelemetry

        return CompileTelemetry
    raise AttributeError(f"module 'runner.telemetry' has no attribute {name!r}")
