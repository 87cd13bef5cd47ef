"""Saved activations: ``offload/*``, what the offload strategy did with the tensors saved for backward, and
its measurement against ``none`` on the run's own path.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

OFFLOAD_STRATEGY = define("offload/strategy", "how activations saved for backward are kept", label="saved activations")
OFFLOAD_ACTIVE = define("offload/active",
                        "whether the strategy changed what was saved (false under none, or on the path none)")
OFFLOAD_PATH = define("offload/path",
                      "the path the strategy took: traced, eager_hooks, mixed, checkpoint_per_block, "
                      "partitioner_budget, cached, pending or none (the measured path when it was measured)")
OFFLOAD_EXCLUDED_MODULES = define("offload/excluded_modules",
                                  "modules whose saved tensors offload.exclude keeps as they are")
OFFLOAD_EAGER_PACKED = define("offload/eager_packed", "saved tensors the hooks packed eagerly")
OFFLOAD_EAGER_SKIPPED = define("offload/eager_skipped",
                               "saved tensors the hooks kept as they were eagerly (not worth packing, excluded, a "
                               "parameter or the batch)")
OFFLOAD_TRACED_PACKED = define("offload/traced_packed",
                               "saved values packed while AOTAutograd traced (per trace, not per step)")
OFFLOAD_TRACED_SKIPPED = define("offload/traced_skipped",
                                "saved values kept as they were while AOTAutograd traced (not worth packing, or "
                                "excluded)")
OFFLOAD_CHECKPOINT_MODE = define("offload/checkpoint_mode",
                                 "how checkpoint recomputes: per_block, or memory_budget (the partitioner's)")
OFFLOAD_CHECKPOINTED_BLOCKS = define("offload/checkpointed_blocks", "blocks wrapped in activation checkpoints")
OFFLOAD_MEMORY_BUDGET = define("offload/memory_budget",
                               "the partitioner's activation memory budget as torch holds it while the run compiles")
OFFLOAD_OFFLOADED_BYTES_TOTAL = define("offload/offloaded_bytes_total",
                                       "bytes of saved activations copied to pinned host memory (CUDA offload)")
OFFLOAD_REDUCTION_X = define("offload/reduction_x",
                             "saved-activation bytes of `none` / of this strategy, on one validation batch",
                             label="  saved bytes reduction [x]")
OFFLOAD_GRAD_REL_ERROR = define("offload/grad_rel_error", "relative gradient error against `none`, same batch",
                                label="  grad rel. error vs none")
OFFLOAD_SAVED_BYTES_NONE = define("offload/saved_bytes_none", "the measurement's saved-activation bytes under none")
OFFLOAD_SAVED_BYTES = define("offload/saved_bytes", "the measurement's saved-activation bytes under this strategy")
OFFLOAD_LOSS_ABS_DIFF = define("offload/loss_abs_diff",
                               "the measurement's absolute loss difference against none, same batch")
OFFLOAD_MEASURE_PATH = define("offload/measure_path", "the path the strategy took in the measurement")
OFFLOAD_MEASURE_COMPILED = define("offload/measure_compiled", "whether the measurement compiled its step")
OFFLOAD_MEASURE_DEVICE = define("offload/measure_device", "the device the measurement ran on")
OFFLOAD_MEASURE_SKIPPED = define("offload/measure_skipped",
                                 "why the measurement could not run here (manual optimization, a sharded strategy, no "
                                 "validation batch)")
