"""Preference tuning (``objective=dpo|simpo|orpo``, docs/preference.md): ``objective/*``, what the step
minimised and where DPO's reference came from. TRL's figures: :mod:`runner.figures.rewards`,
:mod:`runner.figures.logps`, and their validation twins in :mod:`runner.figures.run_preference`.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

OBJECTIVE_LOSS = define("objective/loss", "what the training step minimised (objective.loss): dpo, simpo or orpo; "
                        "absent for sft", label="objective")
OBJECTIVE_BETA = define("objective/beta", "objective.beta: DPO's pull towards the reference, SimPO's reward scale, "
                        "ORPO's weight of the odds-ratio term", label="  beta")
OBJECTIVE_GAMMA = define("objective/gamma", "objective.gamma: SimPO's target reward margin (TRL's simpo_gamma); "
                         "absent for the objectives that have none", label="  gamma")
OBJECTIVE_LABEL_SMOOTHING = define("objective/label_smoothing", "objective.label_smoothing: DPO's and SimPO's share "
                                   "of pairs taken as mislabelled (0: the plain loss); absent for ORPO",
                                   label="  label smoothing")
OBJECTIVE_REFERENCE = define("objective/reference", "where DPO's reference log-probabilities came from: the "
                             "adapter's frozen base in the same compiled step, a frozen copy, or a precomputed cache",
                             label="  reference")
OBJECTIVE_REFERENCE_BYTES = define("objective/reference_bytes", "bytes of the frozen copy of the model that is the "
                                   "reference (objective.reference=copy), on top of the model trained",
                                   label="  reference copy [bytes]")
OBJECTIVE_REFERENCE_CACHE = define("objective/reference_cache", "objective.reference=precompute: the cache of "
                                   "reference log-probabilities, and whether this run computed or read it",
                                   label="  reference cache")
