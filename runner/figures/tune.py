"""``runner tune``: ``tune/*``, what each trial's ``report.json`` gets from the study.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

TUNE_TRIAL = define("tune/trial", "the trial's number in the study (-1: the eager baseline)")
TUNE_STATE = define("tune/state",
                    "how the trial ended: baseline (the eager run), complete, rejected, pruned, invalid or failed")
TUNE_REASON = define("tune/reason", "why the trial ended as it did (empty when complete)")
TUNE_US_PER_TOKEN = define("tune/us_per_token", "microseconds per token over the trial's last 50 steps",
                           label="time/token [us]")
TUNE_SPEEDUP_VS_EAGER_X = define("tune/speedup_vs_eager_x", "the eager baseline's time per token / this trial's",
                                 label="vs eager [x]")
