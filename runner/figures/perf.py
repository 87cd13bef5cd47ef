"""What compiling bought, step by step: ``perf/*``, the step times of the interleaved eager/compiled pairs,
the speedup and the break-even step derived from them, the run's last steps, throughput and MFU.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

PERF_EAGER_STEP_MS = define("perf/eager_step_ms", "median of the eager steps of the interleaved pairs",
                            label="eager step [ms]")
PERF_COMPILED_STEP_MS = define("perf/compiled_step_ms", "median of the compiled steps of the same pairs",
                               label="compiled step [ms]")
PERF_SPEEDUP_X = define("perf/speedup_x",
                        "median over the pairs of eager/compiled time per token (25th to 75th percentile); compiling "
                        "beside the run, pairs after its switch",
                        label="speedup [x]")
PERF_SPEEDUP_P25_X = define("perf/speedup_p25_x", "the 25th percentile of the pairs' eager/compiled ratios")
PERF_SPEEDUP_P75_X = define("perf/speedup_p75_x", "the 75th percentile of the pairs' eager/compiled ratios")
PERF_SPEEDUP_PAIRS = define("perf/speedup_pairs", "eager/compiled pairs the speedup is the median of")
PERF_SPEEDUP_STEPS = define("perf/speedup_steps",
                            "the steps of the interleaved pairs (E C C E ...), after the warm-up and one "
                            "FLOP-counting step",
                            label="  pairs at steps")
PERF_SPEEDUP_STATUS = define("perf/speedup_status",
                             "how far the speedup measurement got: measured, nothing compiled, disabled, N of M pairs "
                             "measured, or measured before the resume")
PERF_BREAK_EVEN_STEP = define("perf/break_even_step",
                              "compile time (+ cost to the eager steps beside a compile process) / time saved per "
                              "step, compiled step x (speedup - 1); never if speedup <= 1",
                              label="break-even step")
PERF_BESIDE_COST_S = define("perf/beside_cost_s",
                            "their time beyond the pairs' eager step; added to the compile time in the break-even step",
                            label="  cost to the eager steps [s]")
PERF_STEP_MS = define("perf/step_ms",
                      "median of the run's last 50 timed steps that compiled nothing (compiled, eager again after "
                      "going back to eager, or eager if nothing compiled)",
                      label="step, last 50 [ms]")
PERF_LEFT_OUT_STEPS = define("perf/left_out_steps",
                             "steps no step time uses: they compiled, or recorded CUDA graphs (host time)",
                             label="  steps left out")
PERF_LEFT_OUT_STEP_MS = define("perf/left_out_step_ms", "median host time of the steps left out (compiling, or "
                               "recording CUDA graphs)", label="    their median [ms]")
PERF_RECORDING_STEPS = define("perf/recording_steps", "of the steps left out, those that only recorded CUDA graphs; "
                              "absent when none did (the others compiled)",
                              label="    of which recording CUDA graphs")
PERF_STEP_SERIES = define("perf/step_series",
                          'every step: [{"step", "ms", "mode", "timed"}], mode compiled, eager, warmup, flops, '
                          "compile, background or reverted (eager again after the switch); timed false: host time of "
                          "a step not waited for (GPU), not plotted")
PERF_STEP_SERIES_STRIDE = define("perf/step_series_stride",
                                 "1, or in a long run the stride of the compiled steps kept in perf/step_series (past "
                                 "4096 of them, those at its multiples)")
PERF_SAMPLES_PER_S = define("perf/samples_per_s",
                            "batch rows a second: rows per step (mean) over perf/step_ms, the same last 50 steps, all "
                            "ranks; a packed row holds several examples (perf/examples_per_s counts them)",
                            label="rows/s")
PERF_TOKENS_PER_S = define("perf/tokens_per_s",
                           "positions of a [batch, seq] batch a second, padding included: per step (mean) over "
                           "perf/step_ms, all ranks (perf/loss_tokens_per_s counts the trained ones)",
                           label="positions/s (padding incl.)")
PERF_EXAMPLES_PER_S = define("perf/examples_per_s",
                             "examples a second, all ranks: a padded row with a target in the loss, or each example "
                             "of a packed row (preference data: pairs; any other batch: its rows); per step (mean) "
                             "over perf/step_ms. Compares packed with padded runs",
                             label="examples/s")
PERF_LOSS_TOKENS_PER_S = define("perf/loss_tokens_per_s",
                                "targets in the loss a second, all ranks (an (inputs, targets) batch of token ids, "
                                "-100 outside the loss): no padding, no prompt; per step (mean) over perf/step_ms",
                                label="tokens in the loss/s")
PERF_TFLOP_PER_STEP = define("perf/tflop_per_step",
                             "FLOPs of one step: counted on one eager step, or 6 x params x tokens",
                             label="TFLOP per step")
PERF_FLOPS_SOURCE = define("perf/flops_source",
                           "where perf/tflop_per_step comes from: flop_counter (one counted eager step), "
                           "6*params*tokens, or none")
PERF_MFU = define("perf/mfu", "FLOP/s achieved over the last 50 steps / the device's peak", label="MFU")
PERF_PEAK_TFLOPS = define("perf/peak_tflops", "the peak MFU is against", label="  device peak [TFLOP/s]")
PERF_PEAK_SOURCE = define("perf/peak_source", "measured by a matmul probe, cached, given, or achieved by this run "
                          "(above the probe's: no MFU then)",
                          label="  peak source")
PERF_HOST_MS_PER_STEP = define("perf/host_ms_per_step",
                               "CUDA only: median host time of the compiled steps not waited for (launching the "
                               "step's work; a replayed CUDA graph makes it small), over the last 1000",
                               label="host per step [ms]")
PERF_DEVICE_BUSY = define("perf/device_busy",
                          "CUDA only: share of one sampled window of compiled steps the device spent running "
                          "kernels (the union of the profiler's kernel times over the window's wall time)",
                          label="device busy")
PERF_DEVICE_BUSY_STEPS = define("perf/device_busy_steps", "the steps of the window perf/device_busy was sampled in")
