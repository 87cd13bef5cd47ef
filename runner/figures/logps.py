"""A preference objective's log-probabilities under TRL's names (``logps/*``), at the last logged training
step.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

LOGPS_CHOSEN = define("logps/chosen", "mean log-probability the policy gives the chosen completions, summed over "
                      "their tokens (SimPO, ORPO: per token)", label="  train logps/chosen")
LOGPS_REJECTED = define("logps/rejected", "the same for the rejected completions", label="  train logps/rejected")
