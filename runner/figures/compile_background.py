"""Compile beside the run (``compile.background``): ``compile/*`` figures of the compile process, the
eager steps trained meanwhile and the switch.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

COMPILE_BACKGROUND = define("compile/background",
                            "compile.background: auto, shared, pinned, or disabled (compiled inside the first step)",
                            label="compile.background")
COMPILE_BACKGROUND_OUTCOME = define("compile/background_outcome",
                                    "switched at which step, stayed eager (and why), not ready when training ended, "
                                    "or failed",
                                    label="  outcome")
COMPILE_BACKGROUND_PLACEMENT = define("compile/background_placement",
                                      "where the compile process ran: on every core (shared), pinned to one core, "
                                      "or on every core but the run's (auto on a GPU)")
COMPILE_BACKGROUND_ROOM = define("compile/background_room",
                                 "auto on a GPU: the device memory free after the first step against what a compile "
                                 "process needs, on which it started one or compiled in the run",
                                 label="  device memory")
COMPILE_BACKGROUND_S = define("compile/background_s", "seconds from starting the compile process to its end",
                              label="  compile process [s]")
COMPILE_EAGER_STEPS_BESIDE = define("compile/eager_steps_beside", "steps trained eagerly while it ran",
                                    label="  eager steps meanwhile")
COMPILE_EAGER_STEP_BESIDE_MS = define("compile/eager_step_beside_ms",
                                      "median wall time of those steps (they share the cores with the compile process)",
                                      label="  eager step meanwhile [ms]")
COMPILE_BACKGROUND_SPEEDUP_X = define("compile/background_speedup_x",
                                      "before the switch: eager/compiled CPU time of the compile process's own step "
                                      "pairs (one batch, in that process), on which auto decides whether to switch",
                                      label="  speedup the process measured [x]")
COMPILE_AFTER_SWITCH_SPEEDUP_X = define("compile/after_switch_speedup_x",
                                        "after the switch, in the run: eager over compiled median wall time of its "
                                        "first compiled steps against the eager steps interleaved with them (the "
                                        "speedup pairs'), else those before the switch; clearly below 1 (at most 0.8) "
                                        "it goes back to eager",
                                        label="  speedup after the switch [x]")
COMPILE_BACKGROUND_REVERTED = define("compile/background_reverted",
                                     "the step from which the run went back to eager because its compiled steps ran "
                                     "clearly slower than the eager ones, with both medians; absent when it did not",
                                     label="  back to eager")
COMPILE_BACKGROUND_SWITCH_S = define("compile/background_switch_s",
                                     "under auto, the compile process's estimate of the switch: the same compile from "
                                     "the warm cache, CPU seconds")
COMPILE_SWITCH_STEP = define("compile/switch_step",
                             "the step at which the run switched to the compiled step (counted from 0, as "
                             "perf/step_series counts)")
