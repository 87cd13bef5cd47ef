"""A preference objective's rewards under TRL's names (``rewards/*``), at the last logged training step.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

REWARDS_CHOSEN = define("rewards/chosen", "mean reward of the chosen completions at the last logged training step: "
                        "beta x (policy - reference log-probability) for DPO; beta x the policy's mean log-probability "
                        "per token for SimPO and ORPO (TRL's)", label="  train rewards/chosen")
REWARDS_REJECTED = define("rewards/rejected", "the same for the rejected completions",
                          label="  train rewards/rejected")
REWARDS_ACCURACIES = define("rewards/accuracies", "share of the step's pairs whose chosen reward is above the "
                            "rejected one's", label="  train rewards/accuracies")
REWARDS_MARGINS = define("rewards/margins", "mean of chosen minus rejected reward over the step's pairs",
                         label="  train rewards/margins")
