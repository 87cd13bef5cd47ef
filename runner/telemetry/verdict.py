"""What the speedup figures say, and the rules that keep the headline figures from contradicting each other."""

from __future__ import annotations

import math
from typing import Any

from runner.metrics import counted


def _number(value: Any) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    number = _number(value)
    return number if number is not None and math.isfinite(number) else None


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


# Fewer eager/compiled pairs than this give no verdict: the speedup is shown, the sentence says so.
MIN_VERDICT_PAIRS = 4


def speedup_verdict(figures: dict[str, Any]) -> tuple[str, str]:
    """``(kind, sentence)``: ``faster``, ``slower``, ``noise`` (too few pairs, quartiles including 1, or medians
    pointing the other way) or ``none`` (no speedup; the sentence says why)."""
    speedup = _number(figures.get("perf/speedup_x"))
    status = str(figures.get("perf/speedup_status") or "")
    if speedup is None or not math.isfinite(speedup):
        beside = str(figures.get("compile/background_outcome") or "")
        if beside.startswith(("stayed eager", "not ready")):  # eager by the compile beside the run's decision
            return "none", f"the run trained eagerly (compile beside the run: {beside})"
        if "back to eager" in beside:  # it switched, then measured the compiled step slower
            return "none", f"the run went back to eager (compile beside the run: {beside})"
        if status == "nothing compiled" or figures.get("compile/scope") == "none":
            resumed = figures.get("run/resumed_at_step")  # the part before the resume may have compiled
            since = f" since the resume at step {resumed}" if resumed is not None else ""
            return "none", f"nothing was compiled{since}: there is no speedup to measure"
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
    few = f"; only {counted(int(pairs), 'pair')}: a rough figure" if pairs is not None and pairs < 10 else ""
    eager, compiled = _number(figures.get("perf/eager_step_ms")), _number(figures.get("perf/compiled_step_ms"))
    if pairs is not None and pairs < MIN_VERDICT_PAIRS:
        # The quartiles of two or three ratios are no spread: one stalled step (a logger's flush, a
        # neighbour's burst) made 2 pairs of 4 ms smoke steps read 25x on the eager backend.
        return "noise", (f"{before}too few pairs to tell compiled from eager steps ({_x(speedup)} from only "
                         f"{counted(int(pairs), 'pair')}; {MIN_VERDICT_PAIRS} or more give a verdict: raise "
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
