"""The reliability callbacks' figures: ``reliability/*``.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

RELIABILITY_SKIPPED_STEPS = define("reliability/skipped_steps",
                                   "steps skipped for a non-finite loss (reliability=skip_nonfinite): their numbers "
                                   "in the report, how many so far in the logged metric")
