"""Shapes: ``dynamic/*``, the shape policy's figures, counted over the training step's own compiles, and
under several ranks what their agreement on dynamic dims cost.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

DYNAMIC_POLICY = define("dynamic/policy", "how changing batch shapes are compiled", label="shape policy")
DYNAMIC_AFTER_WARMUP = define("dynamic/after_warmup", "dynamic.after_warmup: what a new shape after warm-up does")
DYNAMIC_AGREEMENT = define("dynamic/agreement",
                           "how ranks agree on which dims are dynamic: local (one process, or nothing to agree on) or "
                           "runner")
DYNAMIC_GRAPHS = define("dynamic/graphs", "graphs compiled by the training step")
DYNAMIC_FRAME_COMPILES = define("dynamic/frame_compiles",
                                "forward compiles of the training step, first compiles and recompiles")
DYNAMIC_RECOMPILES = define("dynamic/recompiles", "recompiles of the training step")
DYNAMIC_RECOMPILE_REASONS = define("dynamic/recompile_reasons",
                                   "the guard that failed for each recompile of the training step (the first 20)")
DYNAMIC_COMPILE_S = define("dynamic/compile_s", "seconds compiling the training step (its compiles only)")
DYNAMIC_PADDING_WASTE_PCT = define("dynamic/padding_waste_pct", "tokens added by padding to a bucket",
                                   label="  padding [% of tokens]")
DYNAMIC_AGREED_DYNAMIC_DIMS = define("dynamic/agreed_dynamic_dims",
                                     "the (tensor index, dim) pairs of the batch the ranks agreed are dynamic")
DYNAMIC_AGREEMENT_EXCHANGES = define("dynamic/agreement_exchanges",
                                     "steps whose shapes were exchanged (the first step, and one per flagged change)")
DYNAMIC_AGREEMENT_CHECKS = define("dynamic/agreement_checks", "steps whose one-integer flag was all-reduced")
DYNAMIC_AGREEMENT_HELD_STEPS = define("dynamic/agreement_held_steps",
                                      "steps this rank ran eagerly because it saw a size not yet agreed on")
