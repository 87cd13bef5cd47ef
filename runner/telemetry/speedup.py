"""Eager vs compiled step time, measured in the same run, interleaved.

Step times drift 20-30 % between processes on a shared machine, so eager and compiled steps alternate in one
process (ABBA pairs, after a warm-up that compiles everything) and the speedup is the median of the pairs' ratios.
Eager and compiled run the same math, so alternating does not change training."""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

# Compiled steps kept in the step series (report, plot) at most: beyond, one in every ``stride`` (a power of two), so a
# run of a million steps keeps a few thousand points, not a million dicts.
SERIES_POINTS = 4096

# The figures of one speedup measurement (carried through a checkpoint to a resumed run).
SPEEDUP_KEYS = ("perf/eager_step_ms", "perf/compiled_step_ms", "perf/speedup_x", "perf/speedup_p25_x",
                "perf/speedup_p75_x", "perf/break_even_step", "perf/speedup_pairs", "perf/speedup_steps")

# Steps the live figures (``perf/step_ms``, throughput) are computed over: the recent ones, since a recompile changes
# the step time; kept in bounded windows so a live figure costs the same at step 100 000 as at step 10.
RECENT = 50


# The modes of the rest of training (compiled, or eager again after going back), thinned in a long run.
STEADY = ("compiled", "reverted")


class StepSeries:
    """Every step's point for the report and plot, in bounded memory: steady steps are thinned to multiples of
    ``stride``, doubled whenever more than ``SERIES_POINTS`` are kept."""

    def __init__(self) -> None:
        self.stride = 1
        self.points: list[dict[str, Any]] = []
        self._thinned = 0  # compiled points kept

    def append(self, point: dict[str, Any]) -> None:
        if point["mode"] not in STEADY:
            self.points.append(point)
            return
        if point["step"] % self.stride:
            return
        self.points.append(point)
        self._thinned += 1
        if self._thinned > SERIES_POINTS:  # halve the compiled points: amortised O(1) per step
            self.stride *= 2
            self.points = [p for p in self.points if p["mode"] not in STEADY or p["step"] % self.stride == 0]
            self._thinned = sum(p["mode"] in STEADY for p in self.points)


class SpeedupMeter:
    """Chooses each step's mode and aggregates step times; pure Python, no torch."""

    def __init__(self, pairs: int, steady_steps: int = 2, count_flops: bool = True) -> None:
        """``pairs``: eager+compiled step pairs to time (0: no eager steps, no speedup figure)."""
        self.pairs = pairs
        self.steady_steps = steady_steps
        self.schedule: list[str] = []
        if pairs > 0:
            self.schedule = (["flops"] if count_flops else []) + [
                mode for i in range(pairs) for mode in (("eager", "compiled") if i % 2 == 0 else ("compiled", "eager"))
            ]
        self.steps = StepSeries()
        # The recent timed steps: compiled ones, and (for a run that compiles nothing) steady ones.
        self._compiled: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self._steady: deque[dict[str, Any]] = deque(maxlen=RECENT + 1)
        self.window: list[tuple[str, float, int]] = []  # (mode, ms, tokens or samples) of the interleaved steps
        self.window_steps: list[int] = []  # the steps of ``window``, for the report ("steps 5-44")
        self._quiet = 0  # consecutive steps that compiled nothing
        self._measuring = False
        self.compiled_any = False  # a warm-up step compiled something: there is a speedup to measure
        self.ran_compiled = False  # A step ran compiled code without compiling (the warm-up is over).
        self.beside: list[float] = [0, 0.0]  # timed "background" steps: count, total ms (see ``record``)
        # Steps no step-time figure uses because they compiled, or only recorded CUDA graphs.
        self.left_out = {"compiling": 0, "recording": 0}
        self._left_out_ms: deque[float] = deque(maxlen=1000)  # their host times, the recent ones

    def next_mode(self) -> str:
        if not self._measuring:
            return "warmup"
        return self.schedule[0] if self.schedule else "compiled"

    def wants_time(self, mode: str) -> bool:
        """Whether the step about to run in ``mode`` is one of the interleaved pairs, whose time the
        speedup uses (the warm-up and the FLOP-counting step are not timed for it)."""
        return self._measuring and bool(self.schedule) and mode in ("eager", "compiled")

    def record(self, step: int, mode: str, ms: float, compiled_something: bool, samples: int | None = None,
               tokens: int | None = None, timed: bool = True, held: bool = False, recording_only: bool = False,
               examples: Any = None, loss_tokens: Any = None) -> None:
        """Record the step that just ran. ``samples``/``tokens``: the batch's size (padded);
        ``examples``/``loss_tokens`` may be 0-d tensors, read only when a rate is asked for;
        ``timed``: ``ms`` is the step's real time;
        ``held``: the strategy ran it eagerly itself; ``recording_only``: it only recorded CUDA graphs."""
        shown = "compile" if compiled_something else mode
        if compiled_something:
            self.left_out["recording" if recording_only else "compiling"] += 1
            self._left_out_ms.append(ms)
        point = {"step": step, "ms": ms, "mode": shown, "samples": samples, "tokens": tokens, "timed": timed}
        self.steps.append(point)
        self.ran_compiled = self.ran_compiled or shown == "compiled"
        counted = {**point, "examples": examples, "loss_tokens": loss_tokens}  # beside the series: may be tensors
        if timed and shown in STEADY:
            self._compiled.append(counted)
        elif timed and shown == "warmup":
            self._steady.append(counted)
        if mode == "reverted":
            return  # eager again after the compile beside the run measured its compiled step slower: no pair
        if mode == "background":
            # Eager while the compile runs beside the run (compile.background): neither warm-up nor pairs;
            # their time beyond the pairs' eager step is what that compile cost the run.
            if timed:
                self.beside[0] += 1
                self.beside[1] += ms
            return
        if held:
            # Eager by the strategy's choice (CUDA-graph warm-up): not a quiet compiled step, or the warm-up
            # would end before anything of the step compiled and conclude that nothing did.
            self.compiled_any = self.compiled_any or compiled_something
            return
        work = tokens or samples or 1
        if not self._measuring:
            self._quiet = 0 if compiled_something else self._quiet + 1
            self.compiled_any = self.compiled_any or compiled_something
            self._measuring = self._quiet >= self.steady_steps
            if self._measuring and not self.compiled_any:
                # Nothing was compiled (compile=eager): "eager vs compiled" would time eager against
                # itself. No eager steps are forced and no speedup is reported.
                self.schedule = []
            return
        if self.schedule and not compiled_something:
            if mode in ("eager", "compiled"):
                if not timed:
                    return  # not a usable time (the caller did not ask for one): run this pair step again
                self.window.append((mode, ms, work))
                self.window_steps.append(step)
            self.schedule.pop(0)  # a step that compiled is repeated: its time is not a step time

    def rate(self, key: str) -> float | None:
        """``key`` per second over the steps ``perf/step_ms`` is the median of: their mean work per step over that
        median, so a rate and the step time never disagree and one stalled step moves neither."""
        steps = self._recent()
        work = [p[key] for p in steps if p.get(key) is not None]
        if not steps or len(work) < len(steps):
            return None
        ms = statistics.median(p["ms"] for p in steps)
        total = float(sum(work))  # 0-d tensors are read here: once per figure, not once per step
        return total / len(work) / (ms / 1000.0) if ms > 0 and total > 0 else None

    def _recent(self) -> list[dict[str, Any]]:
        """The steps the live figures are over: the recent compiled ones, else the steady ones."""
        if self._compiled:
            return list(self._compiled)
        steady = list(self._steady)
        return steady[1:] or steady  # the oldest: the first warm-up step (which may compile) or one too many

    @property
    def done(self) -> bool:
        return self._measuring and not self.schedule

    def figures(self, compile_time_s: float, series: bool = True) -> dict[str, Any]:
        """``perf/*`` step-time figures; the speedup ones only after the interleaved window. ``series=False`` leaves out
        the step series (the live figures)."""
        out: dict[str, Any] = {}
        if series:
            out["perf/step_series"] = list(self.steps.points)
            out["perf/step_series_stride"] = self.steps.stride
        recent = self._recent()  # recent: recompiles change the step time
        if recent:
            out["perf/step_ms"] = statistics.median(p["ms"] for p in recent)
        if self._left_out_ms:  # never drop a step from the step times without saying so
            out["perf/left_out_steps"] = sum(self.left_out.values())
            out["perf/left_out_step_ms"] = statistics.median(self._left_out_ms)
            if self.left_out["recording"]:  # only where CUDA graphs recorded: a compiling step is no recording
                out["perf/recording_steps"] = self.left_out["recording"]
        out["perf/speedup_status"] = self.status()
        if self.done and self.window and self.compiled_any:
            # Only the interleaved window, so both medians saw the same machine conditions.
            e_ms = statistics.median([ms for mode, ms, _ in self.window if mode == "eager"])
            c_ms = statistics.median([ms for mode, ms, _ in self.window if mode == "compiled"])
            out["perf/eager_step_ms"] = e_ms
            out["perf/compiled_step_ms"] = c_ms
            # The speedup is the median of each adjacent pair's eager/compiled ratio of time per token:
            # a load burst hits both steps of a pair, so it cancels in the ratio (it does not in a ratio
            # of medians), and per token, pairs whose batches differ in length still compare like with like.
            ratios = pair_ratios(self.window)
            out["perf/speedup_x"] = speedup = statistics.median(ratios) if ratios else math.nan
            out["perf/speedup_pairs"] = len(ratios)
            if self.window_steps:
                out["perf/speedup_steps"] = f"{min(self.window_steps)}-{max(self.window_steps)}"
            if len(ratios) >= 2:
                # "inclusive": quartiles inside the measured ratios (the default "exclusive" method
                # extrapolates from few pairs, e.g. -0.57 from two ratios 0.37 and 4.1).
                q = statistics.quantiles(ratios, n=4, method="inclusive")
                out["perf/speedup_p25_x"], out["perf/speedup_p75_x"] = q[0], q[2]
            cost = 0.0
            if self.beside[0]:
                out["perf/beside_cost_s"] = cost = max(0.0, (self.beside[1] - self.beside[0] * e_ms) / 1e3)
            out["perf/break_even_step"] = break_even_step(compile_time_s + cost, c_ms, speedup)
        return out

    def status(self) -> str:
        """Why there is (or is not yet) a speedup figure, for the report: ``measured``, ``nothing
        compiled``, ``disabled`` (no pairs asked for) or how far the pairs got."""
        if self.done and self.window and self.compiled_any:
            return "measured"
        if self.pairs <= 0:
            return "disabled"
        if self._measuring and not self.compiled_any:
            return "nothing compiled"
        if not self._measuring:
            return "warm-up not finished" if self._quiet or self.compiled_any or not self.beside[0] else \
                "the compile beside the run was not in use yet"
        return f"{len(self.window) // 2} of {self.pairs} pairs measured"


def pair_ratios(window: list[tuple[str, float, int]]) -> list[float]:
    """Eager/compiled ratio of time per unit of work of each interleaved pair (window[2k], window[2k+1])."""
    ratios = []
    for a, b in zip(window[::2], window[1::2], strict=False):
        per_unit = {mode: ms / work for mode, ms, work in (a, b)}
        if per_unit.keys() == {"eager", "compiled"} and per_unit["compiled"] > 0:
            ratios.append(per_unit["eager"] / per_unit["compiled"])
    return ratios


def break_even_step(compile_time_s: float, compiled_ms: float, speedup_x: float) -> float:
    """Steps after which compiling has paid for itself, ``inf`` when the speedup is not above 1. From the pairs'
    speedup, not the two medians, so a break-even step never sits beside a speedup below 1."""
    if not math.isfinite(speedup_x) or speedup_x <= 1.0:
        return math.inf
    saved_s = compiled_ms * (speedup_x - 1.0) / 1000.0
    return math.ceil(compile_time_s / saved_s) if saved_s > 0 else math.inf
