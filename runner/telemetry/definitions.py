"""How the figures are shown, and the rules that keep them consistent. What each figure means (its key, label
and meaning) is defined once in ``runner.figures``; this module groups them into the summary's sections
(``SECTIONS``, which the console summary, ``report.md``, the sweep summary and ``docs/report.md`` read) and
holds the rules that keep the headline figures from contradicting each other:

* the speedup is shown with the 25th-75th percentile of its pairs beside it;
* the break-even step is ``never`` whenever the speedup is not above 1 (``break_even_text``);
* one sentence (``speedup_verdict``) says whether compiling paid, and says "no measurable
  difference" when the pairs' quartiles include 1 or when the two sides' medians point the other
  way than the pairs do; :func:`contradictions` checks a figures dict against these rules.
"""

from __future__ import annotations

import math
from typing import Any

from runner.figures import peft as fp
from runner.figures.compile_background import (
    COMPILE_BACKGROUND,
    COMPILE_BACKGROUND_OUTCOME,
    COMPILE_BACKGROUND_S,
    COMPILE_BACKGROUND_SPEEDUP_X,
    COMPILE_EAGER_STEP_BESIDE_MS,
    COMPILE_EAGER_STEPS_BESIDE,
)
from runner.figures.compile_caches import (
    COMPILE_CACHE_HITS,
    COMPILE_CACHE_MISSES,
    COMPILE_REMOTE_CACHE_HITS,
    COMPILE_REMOTE_CACHE_MISSES,
    COMPILE_REMOTE_CACHE_STATUS,
    COMPILE_REMOTE_ENTRIES_REJECTED,
    COMPILE_REMOTE_KERNELS_FETCHED,
    COMPILE_REMOTE_KERNELS_REJECTED,
)
from runner.figures.compile_plan import (
    COMPILE_OPTIMIZER,
    COMPILE_OPTIMIZER_COMPILED_STEPS,
    COMPILE_OPTIMIZER_EAGER_STEPS,
    COMPILE_OPTIONS,
    COMPILE_SCOPE,
)
from runner.figures.compile_work import (
    COMPILE_AOT_AUTOGRAD_S,
    COMPILE_CUDAGRAPH_SKIPS,
    COMPILE_DEMOTIONS,
    COMPILE_DYNAMO_S,
    COMPILE_FALLBACKS,
    COMPILE_FRAMES,
    COMPILE_GRAPH_BREAKS,
    COMPILE_GRAPHS,
    COMPILE_GUARDS_MAX,
    COMPILE_GUARDS_TOTAL,
    COMPILE_INDUCTOR_S,
    COMPILE_RECOMPILES,
    COMPILE_TIME_S,
)
from runner.figures.cudagraphs import (
    CUDAGRAPHS_ACTIVE,
    CUDAGRAPHS_DECISION,
    CUDAGRAPHS_OPTIMIZER_RECORDINGS,
    CUDAGRAPHS_OPTIMIZER_REPLAYS,
    CUDAGRAPHS_PARTITIONS_GRAPHED,
    CUDAGRAPHS_RECORDINGS,
    CUDAGRAPHS_REPLAY_STEPS,
    CUDAGRAPHS_RERECORDINGS,
)
from runner.figures.data import (
    DATA_DROPPED_BY,
    DATA_DROPPED_ROWS,
    DATA_FILES,
    DATA_LABEL_COUNTS,
    DATA_ROWS,
    DATA_SOURCE,
    DATA_SPLIT,
    DATA_TOKENS,
    DATA_TRAIN_SEQUENCES,
    DATA_TRUNCATED_PCT,
    DATA_TRUNCATED_ROWS,
    DATA_UNIGRAM_BPB,
    DATA_VAL_SEQUENCES,
)
from runner.figures.dynamic import DYNAMIC_PADDING_WASTE_PCT, DYNAMIC_POLICY
from runner.figures.memory import MEMORY_PEAK_GIB
from runner.figures.offload import OFFLOAD_GRAD_REL_ERROR, OFFLOAD_REDUCTION_X, OFFLOAD_STRATEGY
from runner.figures.perf import (
    PERF_BESIDE_COST_S,
    PERF_BREAK_EVEN_STEP,
    PERF_COMPILED_STEP_MS,
    PERF_DEVICE_BUSY,
    PERF_EAGER_STEP_MS,
    PERF_HOST_MS_PER_STEP,
    PERF_LEFT_OUT_STEP_MS,
    PERF_LEFT_OUT_STEPS,
    PERF_MFU,
    PERF_PEAK_SOURCE,
    PERF_PEAK_TFLOPS,
    PERF_RECORDING_STEPS,
    PERF_SAMPLES_PER_S,
    PERF_SPEEDUP_P25_X,
    PERF_SPEEDUP_P75_X,
    PERF_SPEEDUP_PAIRS,
    PERF_SPEEDUP_STATUS,
    PERF_SPEEDUP_STEPS,
    PERF_SPEEDUP_X,
    PERF_STEP_MS,
    PERF_TFLOP_PER_STEP,
    PERF_TOKENS_PER_S,
)
from runner.figures.registry import Figure, figure
from runner.figures.run import (
    RUN_EXPORT,
    RUN_LR_SCHEDULE,
    RUN_STEPS,
    RUN_WALL_S,
    TRAIN_LOSS,
    VAL_ACCURACY,
    VAL_BPB,
    VAL_LOSS,
)
from runner.figures.trace import TRACE_HTML
from runner.figures.tune import TUNE_SPEEDUP_VS_EAGER_X, TUNE_US_PER_TOKEN


def _rows(*keys: str) -> tuple[Figure, ...]:
    """The definitions of ``keys``, in order: rows of a table, each with its label."""
    rows = tuple(figure(key) for key in keys)
    unlabelled = [f.key for f in rows if not f.label.strip()]
    if unlabelled:
        raise ValueError(f"figures without a label cannot be rows of a table: {unlabelled}")
    return rows


SECTIONS: tuple[tuple[str, tuple[Figure, ...]], ...] = (
    ("run", _rows(RUN_STEPS, RUN_WALL_S, TRAIN_LOSS, VAL_LOSS, VAL_BPB, VAL_ACCURACY, DATA_UNIGRAM_BPB, RUN_LR_SCHEDULE,
                  RUN_EXPORT)),
    ("fine-tuning", _rows(fp.PEFT_METHOD, fp.PEFT_TARGETS, fp.PEFT_TRAINABLE_PARAMS, fp.PEFT_TOTAL_PARAMS,
                          fp.PEFT_TRAINABLE_PCT, fp.PEFT_OPTIMIZER_STATE_BYTES, fp.PEFT_BASE_WEIGHT_BYTES)),
    ("data", _rows(DATA_SOURCE, DATA_FILES, DATA_ROWS, DATA_TOKENS, DATA_TRAIN_SEQUENCES, DATA_VAL_SEQUENCES,
                   DATA_SPLIT, DATA_TRUNCATED_ROWS, DATA_TRUNCATED_PCT, DATA_DROPPED_ROWS, DATA_DROPPED_BY,
                   DATA_LABEL_COUNTS)),
    ("compile stack", _rows(COMPILE_SCOPE, COMPILE_OPTIONS, COMPILE_OPTIMIZER, DYNAMIC_POLICY,
                            DYNAMIC_PADDING_WASTE_PCT, OFFLOAD_STRATEGY, OFFLOAD_REDUCTION_X, OFFLOAD_GRAD_REL_ERROR,
                            CUDAGRAPHS_DECISION, CUDAGRAPHS_ACTIVE, CUDAGRAPHS_RECORDINGS, CUDAGRAPHS_RERECORDINGS,
                            CUDAGRAPHS_REPLAY_STEPS, CUDAGRAPHS_PARTITIONS_GRAPHED, CUDAGRAPHS_OPTIMIZER_RECORDINGS,
                            CUDAGRAPHS_OPTIMIZER_REPLAYS)),
    ("what compiling did", _rows(COMPILE_FRAMES, COMPILE_GRAPHS, COMPILE_RECOMPILES, COMPILE_GRAPH_BREAKS,
                                 COMPILE_GUARDS_TOTAL, COMPILE_GUARDS_MAX, COMPILE_TIME_S, COMPILE_DYNAMO_S,
                                 COMPILE_AOT_AUTOGRAD_S, COMPILE_INDUCTOR_S, COMPILE_CACHE_HITS, COMPILE_CACHE_MISSES,
                                 COMPILE_REMOTE_CACHE_STATUS, COMPILE_REMOTE_CACHE_HITS, COMPILE_REMOTE_CACHE_MISSES,
                                 COMPILE_REMOTE_ENTRIES_REJECTED, COMPILE_REMOTE_KERNELS_FETCHED,
                                 COMPILE_REMOTE_KERNELS_REJECTED, COMPILE_CUDAGRAPH_SKIPS, COMPILE_FALLBACKS,
                                 COMPILE_DEMOTIONS,
                                 COMPILE_OPTIMIZER_COMPILED_STEPS, COMPILE_OPTIMIZER_EAGER_STEPS)),
    ("compile beside the run", _rows(COMPILE_BACKGROUND, COMPILE_BACKGROUND_OUTCOME, COMPILE_BACKGROUND_S,
                                     COMPILE_EAGER_STEPS_BESIDE, COMPILE_EAGER_STEP_BESIDE_MS, PERF_BESIDE_COST_S,
                                     COMPILE_BACKGROUND_SPEEDUP_X)),
    ("what compiling bought", _rows(PERF_EAGER_STEP_MS, PERF_COMPILED_STEP_MS, PERF_SPEEDUP_X, PERF_SPEEDUP_STEPS,
                                    PERF_BREAK_EVEN_STEP, PERF_STEP_MS, PERF_HOST_MS_PER_STEP, PERF_DEVICE_BUSY,
                                    PERF_LEFT_OUT_STEPS, PERF_RECORDING_STEPS,
                                    PERF_LEFT_OUT_STEP_MS, PERF_SAMPLES_PER_S, PERF_TOKENS_PER_S, PERF_TFLOP_PER_STEP,
                                    PERF_MFU, PERF_PEAK_TFLOPS, PERF_PEAK_SOURCE, MEMORY_PEAK_GIB, TRACE_HTML)),
)
"""The summary's sections and rows, in order: the console table, ``report.md`` and docs/report.md show them."""

FIGURES: dict[str, Figure] = {f.key: f for _, figures in SECTIONS for f in figures}
# Figures of other tables (the sweep summary, runner tune's): defined here too, shown in their legends.
FIGURES.update({f.key: f for f in _rows(TUNE_US_PER_TOKEN, TUNE_SPEEDUP_VS_EAGER_X)})

TIMING_LEGEND = ("speedup [x]", "break-even step", "step, last 50 [ms]")
"""Rows whose definitions the console prints under its table (the rest: report.md, docs/report.md)."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def break_even_text(figures: dict[str, Any]) -> str | None:
    """The break-even step as shown: a step number, ``never`` (no break-even, or a speedup not above 1;
    also a report.json that stored it as ``"never"``), or None when no speedup was measured."""
    value, speedup = figures.get(PERF_BREAK_EVEN_STEP), _number(figures.get(PERF_SPEEDUP_X))
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
    status = str(figures.get(PERF_SPEEDUP_STATUS) or "")
    if status == "nothing compiled" or figures.get(COMPILE_SCOPE) == "none":
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
    speedup = _number(figures.get(PERF_SPEEDUP_X))
    status = str(figures.get(PERF_SPEEDUP_STATUS) or "")
    if speedup is None or not math.isfinite(speedup):
        beside = str(figures.get(COMPILE_BACKGROUND_OUTCOME) or "")
        if beside.startswith(("stayed eager", "not ready")):  # eager by the compile beside the run's decision
            return "none", f"the run trained eagerly (compile beside the run: {beside})"
        if status == "nothing compiled" or figures.get(COMPILE_SCOPE) == "none":
            return "none", "nothing was compiled: there is no speedup to measure"
        if status == "disabled":
            return "none", "speedup not measured: telemetry.speedup_steps=0"
        why = f" ({status})" if status else ""
        return "none", (f"speedup not measured{why}: the warm-up and the eager/compiled pairs did not finish "
                        "before the last step; a longer run (trainer.max_steps) measures it")
    resumed = status == "measured before the resume"
    before = "before the resume, " if resumed else ""
    p25, p75 = _number(figures.get(PERF_SPEEDUP_P25_X)), _number(figures.get(PERF_SPEEDUP_P75_X))
    quartiles = p25 is not None and p75 is not None
    spread = f", the pairs' 25th to 75th percentile {p25:.2f} to {p75:.2f}" if quartiles else ""
    pairs = _number(figures.get(PERF_SPEEDUP_PAIRS))
    # Timing eager against itself on a shared 2-core machine gave 0.91 with 10 pairs (speedup.py).
    few = f"; only {int(pairs)} pairs: a rough figure" if pairs is not None and pairs < 10 else ""
    eager, compiled = _number(figures.get(PERF_EAGER_STEP_MS)), _number(figures.get(PERF_COMPILED_STEP_MS))
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
    seconds = _number(figures.get(COMPILE_TIME_S))
    beside = _number(figures.get(PERF_BESIDE_COST_S)) or 0.0
    return None if seconds is None else seconds + beside


def contradictions(figures: dict[str, Any]) -> list[str]:
    """The rules the headline figures keep; each broken one as a sentence ([] when consistent)."""
    out: list[str] = []
    speedup = _number(figures.get(PERF_SPEEDUP_X))
    raw = figures.get(PERF_BREAK_EVEN_STEP)  # as measured, before any display rule
    raw_number = _number(raw)
    finite = raw_number is not None and math.isfinite(raw_number)
    if speedup is not None and speedup <= 1.0 and finite:
        out.append(f"break-even {raw} beside a speedup of {speedup:.4g} (not above 1)")
    if speedup is not None and speedup > 1.0 and raw is not None and not finite:
        out.append(f"break-even {raw} beside a speedup of {speedup:.4g}")
    p25, p75 = _number(figures.get(PERF_SPEEDUP_P25_X)), _number(figures.get(PERF_SPEEDUP_P75_X))
    if speedup is not None and p25 is not None and p75 is not None and not p25 <= speedup <= p75:
        out.append(f"speedup {speedup:.4g} outside its quartiles {p25:.4g}-{p75:.4g}")
    kind, _ = speedup_verdict(figures)
    eager, compiled = _number(figures.get(PERF_EAGER_STEP_MS)), _number(figures.get(PERF_COMPILED_STEP_MS))
    if kind in ("faster", "slower") and eager is not None and compiled is not None \
            and (kind == "faster") != (eager > compiled):
        out.append(f"verdict {kind} beside eager {eager:.4g} ms and compiled {compiled:.4g} ms")
    if speedup is None and any(k in figures for k in (PERF_BREAK_EVEN_STEP, PERF_SPEEDUP_P25_X)):
        out.append("speedup figures without a speedup")
    seconds = compile_cost_s(figures)
    if finite and speedup is not None and speedup > 1.0 and compiled is not None and seconds is not None \
            and figures.get(PERF_SPEEDUP_STATUS) == "measured":  # carried figures used an earlier compile time
        expected = math.ceil(seconds / (compiled * (speedup - 1.0) / 1000.0))
        if expected != raw:
            out.append(f"break-even {raw}, but compile time / time saved per step gives {expected}")
    return out
