"""TRL's preference figures over the validation pairs (``val/rewards/*``, ``val/logps/*``), at the last
validation; what a preference step logs, in TRL's order (``TRAIN_METRICS``, ``VAL_METRICS``).

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.logps import LOGPS_CHOSEN, LOGPS_REJECTED
from runner.figures.registry import define
from runner.figures.rewards import REWARDS_ACCURACIES, REWARDS_CHOSEN, REWARDS_MARGINS, REWARDS_REJECTED

VAL_REWARDS_CHOSEN = define("val/rewards/chosen", "rewards/chosen over the validation pairs at the last validation",
                            label="  val rewards/chosen")
VAL_REWARDS_REJECTED = define("val/rewards/rejected", "rewards/rejected over the validation pairs",
                              label="  val rewards/rejected")
VAL_REWARDS_ACCURACIES = define("val/rewards/accuracies", "share of the validation pairs whose chosen reward is above "
                                "the rejected one's: the preference accuracy", label="  val rewards/accuracies")
VAL_REWARDS_MARGINS = define("val/rewards/margins", "rewards/margins over the validation pairs",
                             label="  val rewards/margins")
VAL_LOGPS_CHOSEN = define("val/logps/chosen", "logps/chosen over the validation pairs", label="  val logps/chosen")
VAL_LOGPS_REJECTED = define("val/logps/rejected", "logps/rejected over the validation pairs",
                            label="  val logps/rejected")

TRAIN_METRICS = (REWARDS_CHOSEN, REWARDS_REJECTED, REWARDS_ACCURACIES, REWARDS_MARGINS, LOGPS_CHOSEN, LOGPS_REJECTED)
"""What a preference step logs beside its loss, in TRL's order."""
VAL_METRICS = (VAL_REWARDS_CHOSEN, VAL_REWARDS_REJECTED, VAL_REWARDS_ACCURACIES, VAL_REWARDS_MARGINS,
               VAL_LOGPS_CHOSEN, VAL_LOGPS_REJECTED)
"""The same, for validation."""
