"""The error a configuration that cannot run raises, before anything expensive happens."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the key, the value and the fix."""
