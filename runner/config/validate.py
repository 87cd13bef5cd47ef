"""Cross-group checks: combinations that cannot work are refused before any work starts."""

from __future__ import annotations

from runner.config.schema import RunConfig


def validate(cfg: RunConfig) -> None:
    """Raise ``ConfigError`` naming the keys, values and the fix for an impossible combination."""
