"""The error a configuration that cannot run raises, and the "did you mean" its messages offer for a misspelt name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the key, the value and the fix."""


def close_matches(name: str, candidates: Iterable[str]) -> list[str]:
    """At most three candidates close to ``name``, closest first: difflib's ratio >= 0.6 and within 0.1 of the best
    (``max_step`` gets ``max_steps``, not also ``max_time``)."""
    scored = sorted(((difflib.SequenceMatcher(None, name, c).ratio(), c) for c in candidates), reverse=True)
    return [c for ratio, c in scored[:3] if ratio >= 0.6 and ratio >= scored[0][0] - 0.1]
