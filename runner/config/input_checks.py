"""Checks of what a user types: paths, device counts, checkpoints, recipe fields (see validate)."""

from __future__ import annotations

from collections.abc import Callable

from runner.config.schema import RunConfig

CHECKS: list[Callable[[RunConfig], str | None]] = []
