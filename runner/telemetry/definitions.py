"""What every figure of the run report means, once: its label, what it measures and over which steps.

The console summary, ``report.md``, the sweep summary and ``docs/report.md`` all read these
definitions, and the rules that keep the headline figures from contradicting each other live here:

* the speedup is shown with the 25th-75th percentile of its pairs beside it;
* the break-even step is ``never`` whenever the speedup is not above 1 (``break_even_text``);
* one sentence (``speedup_verdict``) says whether compiling paid, and says "no measurable
  difference" when the pairs' quartiles include 1 or when the two sides' medians point the other
  way than the pairs do; :func:`contradictions` checks a figures dict against these rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    """One row of the summary: its report key, its label and what it measures."""

    key: str
    label: str
    meaning: str


SECTIONS: tuple[tuple[str, tuple[Figure, ...]], ...] = (
    ("run", (
        Figure("run/steps", "steps", "optimizer steps trained (a resumed run counts from the first run's start)"),
        Figure("run/wall_s", "wall time [s]", "seconds in trainer.fit in this process: training, validation, compiles"),
        Figure("train/loss", "train loss", "the last logged training loss"),
        Figure("val/loss", "val loss", "loss over the validation batches at the last validation"),
        Figure("val/bpb", "val bits per byte", "the validation loss in bits per byte of text"),
        Figure("data/unigram_bpb", "  unigram entropy [bits/byte]",
               "the data's byte entropy: what a model that learned only byte frequencies scores"),
    )),
    ("compile stack", (
        Figure("compile/scope", "compile scope", "what torch.compile wraps: step, blocks, model (none: eager)"),
        Figure("compile/options", "  Inductor options", "options passed to torch.compile, runner's defaults included"),
        Figure("compile/optimizer", "optimizer step", "how the optimizer step runs (fused kernel, compiled, as given)"),
        Figure("dynamic/policy", "shape policy", "how changing batch shapes are compiled"),
        Figure("dynamic/padding_waste_pct", "  padding [% of tokens]", "tokens added by padding to a bucket"),
        Figure("offload/strategy", "saved activations", "how activations saved for backward are kept"),
        Figure("offload/reduction_x", "  saved bytes reduction [x]",
               "saved-activation bytes of `none` / of this strategy, on one validation batch"),
        Figure("offload/grad_rel_error", "  grad rel. error vs none",
               "relative gradient error against `none`, same batch"),
        Figure("cudagraphs/active", "CUDA graphs active", "whether CUDA graphs were recorded and replayed"),
        Figure("cudagraphs/recordings", "  graphs recorded", "CUDA graphs recorded (graph partitions), all steps"),
        Figure("cudagraphs/rerecordings", "  recorded again",
               "recordings of a graph already recorded in an earlier step (0 when replays hold)"),
        Figure("cudagraphs/replay_steps", "  steps replayed",
               "steps whose own forward and backward replayed their graphs, recording nothing"),
        Figure("cudagraphs/partitions_graphed", "  partitions in CUDA graphs",
               "graph partitions Inductor made CUDA graphs of, of all it made (each compiled graph is split where "
               "a node cannot be recorded; the rest run eagerly, each reason listed under the table with its fix)"),
    )),
    ("what compiling did", (
        Figure("compile/frames", "frames compiled", "Python functions Dynamo compiled"),
        Figure("compile/graphs", "graphs", "FX graphs produced (a graph break splits a function into several)"),
        Figure("compile/recompiles", "recompiles", "compiles of an already compiled function after a guard failed"),
        Figure("compile/graph_breaks", "graph breaks", "distinct places where Dynamo split the graph"),
        Figure("compile/guards_total", "guards (total)", "guards checked before compiled code runs, all cache entries"),
        Figure("compile/guards_max", "guards (max per entry)", "guards of the largest cache entry"),
        Figure("compile/time_s", "compile time [s]",
               "seconds compiling in this process: forward, backward, recompiles"),
        Figure("compile/dynamo_s", "  Dynamo [s]", "of which tracing Python into graphs"),
        Figure("compile/aot_autograd_s", "  AOTAutograd [s]", "of which building the backward graphs"),
        Figure("compile/inductor_s", "  Inductor [s]", "of which generating and compiling kernels"),
        Figure("compile/cache_hits", "compile-cache hits", "graphs loaded from Inductor's or AOTAutograd's disk cache"),
        Figure("compile/cache_misses", "compile-cache misses", "graphs looked up in those caches and compiled anew"),
        Figure("compile/remote_cache_status", "shared cache (compile.cache)",
               "in use; compiled graphs only (no kernel-signing secret); unreachable; or off after a failure, "
               "and why"),
        Figure("compile/remote_cache_hits", "shared-cache hits",
               "graphs found in the shared compile cache (compile.cache), FX-graph and AOTAutograd"),
        Figure("compile/remote_cache_misses", "shared-cache misses", "graphs looked up there and compiled anew"),
        Figure("compile/remote_kernels_fetched", "  kernels fetched", "CPU: built kernels taken from the shared cache"),
        Figure("compile/remote_kernels_rejected", "  kernels rejected",
               "CPU: shared entries not written: a bad name, signature or content (compiled here instead)"),
        Figure("compile/cudagraph_skips", "CUDA-graph skips", "graphs Inductor did not run as CUDA graphs"),
        Figure("compile/fallbacks", "eager fallbacks", "functions that failed to compile and ran eagerly"),
        Figure("compile/demotions", "demoted frames",
               "frames that recompiled twice on one guard and were demoted (compile/demoted: which, to what)"),
        Figure("compile/optimizer_compiled_steps", "optimizer steps compiled",
               "optimizer steps that ran the compiled step"),
        Figure("compile/optimizer_eager_steps", "optimizer steps eager",
               "optimizer steps that ran eagerly (forced-eager steps: warm-up, the speedup pairs' eager side)"),
    )),
    ("compile beside the run", (
        Figure("compile/background", "compile.background",
               "compile.background: auto, shared, pinned, or disabled (compiled inside the first step)"),
        Figure("compile/background_outcome", "  outcome",
               "switched at which step, stayed eager (and why), not ready when training ended, or failed"),
        Figure("compile/background_s", "  compile process [s]", "seconds from starting the compile process to its end"),
        Figure("compile/eager_steps_beside", "  eager steps meanwhile", "steps trained eagerly while it ran"),
        Figure("compile/eager_step_beside_ms", "  eager step meanwhile [ms]",
               "median wall time of those steps (they share the cores with the compile process)"),
        Figure("perf/beside_cost_s", "  cost to the eager steps [s]",
               "their time beyond the pairs' eager step; added to the compile time in the break-even step"),
        Figure("compile/background_speedup_x", "  speedup it measured [x]",
               "eager/compiled CPU time of its own step pairs, on which auto decides whether to switch"),
    )),
    ("what compiling bought", (
        Figure("perf/eager_step_ms", "eager step [ms]", "median of the eager steps of the interleaved pairs"),
        Figure("perf/compiled_step_ms", "compiled step [ms]", "median of the compiled steps of the same pairs"),
        Figure("perf/speedup_x", "speedup [x]",
               "median over the pairs of eager/compiled time per token (25th to 75th percentile)"),
        Figure("perf/speedup_steps", "  pairs at steps",
               "the steps of the interleaved pairs (E C C E ...), after the warm-up and one FLOP-counting step"),
        Figure("perf/break_even_step", "break-even step",
               "compile time (+ cost to the eager steps beside a compile process) / time saved per step, "
               "compiled step x (speedup - 1); never if speedup <= 1"),
        Figure("perf/step_ms", "step, last 50 [ms]",
               "median of the run's last 50 timed steps that compiled nothing (compiled, or eager if none)"),
        Figure("perf/left_out_steps", "  steps left out",
               "steps no step time uses: they compiled, or recorded CUDA graphs (host time)"),
        Figure("perf/recording_steps", "    recording CUDA graphs", "of which only recorded CUDA graphs"),
        Figure("perf/left_out_step_ms", "    their median [ms]", "median host time of the steps left out"),
        Figure("perf/samples_per_s", "samples/s", "samples over time of the same last 50 steps (all ranks)"),
        Figure("perf/tokens_per_s", "tokens/s", "tokens over time of the same last 50 steps (all ranks)"),
        Figure("perf/tflop_per_step", "TFLOP per step",
               "FLOPs of one step: counted on one eager step, or 6 x params x tokens"),
        Figure("perf/mfu", "MFU", "FLOP/s achieved over the last 50 steps / the device's peak"),
        Figure("perf/peak_tflops", "  device peak [TFLOP/s]", "the peak MFU is against"),
        Figure("perf/peak_source", "  peak source",
               "measured by a matmul probe, cached, given, or achieved by this run"),
        Figure("memory/peak_gib", "peak memory [GiB]",
               "CUDA: peak allocated by tensors; CPU: the process's peak resident set"),
        Figure("trace/html", "compile report (tlparse)", "tlparse's report of every compile"),
    )),
)

FIGURES: dict[str, Figure] = {f.key: f for _, figures in SECTIONS for f in figures}
# Figures of other tables (the sweep summary, runner tune's): defined here too, shown in their legends.
FIGURES.update({f.key: f for f in (
    Figure("tune/us_per_token", "time/token [us]", "microseconds per token over the trial's last 50 steps"),
    Figure("tune/speedup_vs_eager_x", "vs eager [x]", "the eager baseline's time per token / this trial's"),
)})

TIMING_LEGEND = ("speedup [x]", "break-even step", "step, last 50 [ms]")
"""Rows whose definitions the console prints under its table (the rest: report.md, docs/report.md)."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def break_even_text(figures: dict[str, Any]) -> str | None:
    """The break-even step as shown: a step number, ``never`` (no break-even, or a speedup not above 1;
    also a report.json that stored it as ``"never"``), or None when no speedup was measured."""
    value, speedup = figures.get("perf/break_even_step"), _number(figures.get("perf/speedup_x"))
    if value is None and speedup is None:
        return None
    if value == "never" or (speedup is not None and speedup <= 1.0):
        return "never"
    number = _number(value)
    return "never" if number is None or not math.isfinite(number) else str(int(number))


def break_even_cell(figures: dict[str, Any]) -> str:
    """The break-even step for a table: ``never``, a step number, or, when the speedup is within the
    noise, ``uncertain (N at the median)``: a step number is only as sure as the speedup it comes from."""
    shown = break_even_text(figures) or "-"
    return f"uncertain ({shown} at the median)" if shown.isdigit() and speedup_verdict(figures)[0] == "noise" else shown


def missing_speedup(figures: dict[str, Any]) -> str:
    """What the speedup cell says when there is no speedup: ``nothing compiled``, ``disabled``, or
    ``not measured (...)`` with how far the measurement got."""
    status = str(figures.get("perf/speedup_status") or "")
    if status == "nothing compiled" or figures.get("compile/scope") == "none":
        return "nothing compiled"
    if status == "disabled":
        return "disabled"
    return f"not measured ({status})" if status else "not measured"


def _x(value: float) -> str:
    return f"{value:.2f}x"


MIN_VERDICT_PAIRS = 4
"""Fewer eager/compiled pairs than this give no verdict: the speedup is shown, the sentence says so."""


def speedup_verdict(figures: dict[str, Any]) -> tuple[str, str]:
    """``(kind, sentence)``: whether compiling paid, at a glance. ``kind`` is ``faster``, ``slower``,
    ``noise`` (fewer than ``MIN_VERDICT_PAIRS`` pairs, the pairs' quartiles include 1, or the medians
    point the other way than the pairs) or
    ``none`` (no speedup figure; the sentence says why)."""
    speedup = _number(figures.get("perf/speedup_x"))
    status = str(figures.get("perf/speedup_status") or "")
    if speedup is None or not math.isfinite(speedup):
        beside = str(figures.get("compile/background_outcome") or "")
        if beside.startswith(("stayed eager", "not ready")):  # eager by the compile beside the run's decision
            return "none", f"the run trained eagerly (compile beside the run: {beside})"
        if status == "nothing compiled" or figures.get("compile/scope") == "none":
            return "none", "nothing was compiled: there is no speedup to measure"
        if status == "disabled":
            return "none", "speedup not measured: telemetry.speedup_steps=0"
        why = f" ({status})" if status else ""
        return "none", (f"speedup not measured{why}: the warm-up and the eager/compiled pairs did not finish "
                        "before the last step; a longer run (trainer.max_steps) measures it")
    resumed = status == "measured before the resume"
    before = "before the resume, " if resumed else ""
    p25, p75 = _number(figures.get("perf/speedup_p25_x")), _number(figures.get("perf/speedup_p75_x"))
    quartiles = p25 is not None and p75 is not None
    spread = f", the pairs' 25th to 75th percentile {p25:.2f} to {p75:.2f}" if quartiles else ""
    pairs = _number(figures.get("perf/speedup_pairs"))
    # Timing eager against itself on a shared 2-core machine gave 0.91 with 10 pairs (speedup.py).
    few = f"; only {int(pairs)} pairs: a rough figure" if pairs is not None and pairs < 10 else ""
    eager, compiled = _number(figures.get("perf/eager_step_ms")), _number(figures.get("perf/compiled_step_ms"))
    if pairs is not None and pairs < MIN_VERDICT_PAIRS:
        # The quartiles of two or three ratios are no spread: one stalled step (a logger's flush, a
        # neighbour's burst) made 2 pairs of 4 ms smoke steps read 25x on the eager backend.
        return "noise", (f"{before}too few pairs to tell compiled from eager steps ({_x(speedup)} from only "
                         f"{int(pairs)} pairs; {MIN_VERDICT_PAIRS} or more give a verdict: raise "
                         "telemetry.speedup_steps, and trainer.max_steps to run them)")
    if p25 is not None and p75 is not None and p25 <= 1.0 <= p75:
        return "noise", (f"{before}no measurable difference between compiled and eager steps "
                         f"({_x(speedup)}{spread}: the range includes 1{few})")
    if eager is not None and compiled is not None and (eager - compiled) * (speedup - 1.0) <= 0:
        return "noise", (f"{before}no measurable difference: the pairs' median ratio ({_x(speedup)}) and the two "
                         f"sides' medians ({eager:.4g} vs {compiled:.4g} ms) point opposite ways, so the "
                         f"machine's load changed during the pairs{few}")
    if speedup > 1.0:
        text = f"{before}compiled steps took {1 - 1 / speedup:.0%} less time than eager ({_x(speedup)}{spread}{few})"
        steps, seconds = break_even_text(figures), compile_cost_s(figures)
        if steps not in (None, "never"):
            # A carried break-even used the earlier run's compile time: no seconds from this one beside it.
            if resumed or seconds is None:
                text += f"; compiling pays for itself after {steps} steps"
            else:
                text += f"; the {seconds:.3g} s of compiling pay for themselves after {steps} steps"
        return "faster", text
    more = f"{1 / speedup:.1f} times as long as" if speedup <= 0.5 else f"{1 / speedup - 1:.0%} more time than"
    return "slower", (f"{before}compiled steps took {more} eager ({_x(speedup)}{spread}{few}): compiling does not "
                      "pay for itself here (break-even: never)")


def compile_cost_s(figures: dict[str, Any]) -> float | None:
    """What compiling cost the run in seconds, as the break-even step counts it: the compile time in this
    process plus what a compile process beside the run cost the eager steps (``perf/beside_cost_s``)."""
    seconds = _number(figures.get("compile/time_s"))
    beside = _number(figures.get("perf/beside_cost_s")) or 0.0
    return None if seconds is None else seconds + beside


def contradictions(figures: dict[str, Any]) -> list[str]:
    """The rules the headline figures keep; each broken one as a sentence ([] when consistent)."""
    out: list[str] = []
    speedup = _number(figures.get("perf/speedup_x"))
    raw = figures.get("perf/break_even_step")  # as measured, before any display rule
    raw_number = _number(raw)
    finite = raw_number is not None and math.isfinite(raw_number)
    if speedup is not None and speedup <= 1.0 and finite:
        out.append(f"break-even {raw} beside a speedup of {speedup:.4g} (not above 1)")
    if speedup is not None and speedup > 1.0 and raw is not None and not finite:
        out.append(f"break-even {raw} beside a speedup of {speedup:.4g}")
    p25, p75 = _number(figures.get("perf/speedup_p25_x")), _number(figures.get("perf/speedup_p75_x"))
    if speedup is not None and p25 is not None and p75 is not None and not p25 <= speedup <= p75:
        out.append(f"speedup {speedup:.4g} outside its quartiles {p25:.4g}-{p75:.4g}")
    kind, _ = speedup_verdict(figures)
    eager, compiled = _number(figures.get("perf/eager_step_ms")), _number(figures.get("perf/compiled_step_ms"))
    if kind in ("faster", "slower") and eager is not None and compiled is not None \
            and (kind == "faster") != (eager > compiled):
        out.append(f"verdict {kind} beside eager {eager:.4g} ms and compiled {compiled:.4g} ms")
    if speedup is None and any(k in figures for k in ("perf/break_even_step", "perf/speedup_p25_x")):
        out.append("speedup figures without a speedup")
    seconds = compile_cost_s(figures)
    if finite and speedup is not None and speedup > 1.0 and compiled is not None and seconds is not None \
            and figures.get("perf/speedup_status") == "measured":  # carried figures used an earlier compile time
        expected = math.ceil(seconds / (compiled * (speedup - 1.0) / 1000.0))
        if expected != raw:
            out.append(f"break-even {raw}, but compile time / time saved per step gives {expected}")
    return out
