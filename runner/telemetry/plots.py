"""The report's pictures: ``step_times.png`` (one run) and ``summary.png`` (a sweep)."""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.metrics import counted
from runner.telemetry.verdict import finite_number, missing_speedup, speedup_verdict

if TYPE_CHECKING:  # matplotlib is imported when a picture is drawn, not with the report
    from matplotlib.figure import Figure

# Each step's mode, and each compile mark's kind (a step that compiled is drawn in its compile's colour).
_COLORS = {"compiled": "tab:blue", "eager": "tab:orange", "warmup": "tab:gray", "flops": "tab:gray",
           "background": "tab:olive", "reverted": "tab:brown", "compile": "tab:green", "recompile": "tab:red"}


def _figure(**kwargs: Any) -> Figure:
    """A figure of its own, not pyplot's: switching pyplot to Agg would close the figures open in a user's notebook."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _pair_span(figures: dict[str, Any], points: list[dict[str, Any]]) -> tuple[int, int] | None:
    """First and last step of the interleaved pairs (``perf/speedup_steps``, else the eager steps)."""
    text = str(figures.get("perf/speedup_steps") or "")
    first, _, last = text.partition("-")
    if first.isdigit() and last.isdigit() and figures.get("perf/speedup_status") == "measured":
        return int(first), int(last)
    eager = [p["step"] for p in points if p["mode"] == "eager"]
    return (min(eager), max(eager)) if eager else None


def _events_by_step(figures: dict[str, Any]) -> list[tuple[int, str, float]]:
    """(step, kind, seconds) per step: a step's forward and backward compiles are one mark."""
    merged: dict[tuple[int, str], float] = {}
    for event in figures.get("compile/events") or []:
        step, kind = event.get("step"), event.get("kind")
        if step is None or kind == "cudagraph_recording":  # a recording runs a graph, it does not compile
            continue
        kind = "recompile" if kind == "recompile" else "compile"
        merged[(step, kind)] = merged.get((step, kind), 0.0) + float(event.get("duration_s") or 0.0)
    return [(step, kind, seconds) for (step, kind), seconds in sorted(merged.items())]


def plot_step_times(figures: dict[str, Any], path: Path) -> bool:
    """Draw ``step_times.png``; False (nothing written) when there are no timed steps."""
    fig = step_times_figure(figures)
    if fig is not None:
        fig.savefig(path, dpi=110)
    return fig is not None


def step_times_figure(figures: dict[str, Any]) -> Figure | None:
    """The matplotlib figure of ``step_times.png``; None when there are no timed steps."""
    points = [p for p in figures.get("perf/step_series") or [] if p.get("timed", True)]
    if not points:
        return None
    compiled_any = any(p["mode"] == "compile" for p in points) or bool(figures.get("compile/events"))
    # The y-axis covers the steps that say what a step costs: the pairs and the steady compiled steps
    # (the warm-up's first steps can be many times slower, and a compile step 1000 times).
    steady = ([p["ms"] for p in points if p["mode"] in ("compiled", "eager", "reverted")]
              or [p["ms"] for p in points if p["mode"] != "compile"] or [p["ms"] for p in points])
    top = 1.15 * max(steady)  # Q3 + 3 IQR of the steady steps (no higher than the slowest), with headroom
    if len(steady) >= 4:
        q1, _, q3 = statistics.quantiles(steady, n=4, method="inclusive")
        top = 1.15 * min(max(steady), q3 + 3 * (q3 - q1))
    fig = _figure(figsize=(9, 4.5))
    ax = fig.subplots()
    span = _pair_span(figures, points)
    if span is not None:
        ax.axvspan(span[0] - 0.5, span[1] + 0.5, color="0.92", zorder=0, label="eager/compiled pairs")
    names = {"compiled": "compiled steps" if compiled_any else "steps (nothing compiled)", "eager": "eager steps",
             "warmup": "warm-up", "flops": "FLOP-counting step (eager)",
             "background": "eager, compiling beside the run", "reverted": "eager again: compiled measured slower"}
    any_clipped = False
    for mode in ("background", "warmup", "flops", "compile", "eager", "compiled", "reverted"):
        pts = [p for p in points if p["mode"] == mode]
        if not pts:
            continue
        color = _COLORS[mode]
        marker = {"flops": "x", "compile": "D"}.get(mode, "o")
        # The step that compiled is named by its compile mark, not in the legend a second time.
        label = None if mode == "compile" else f"{names[mode]} ({len(pts)})"
        shown = [p for p in pts if p["ms"] <= top]
        ax.scatter([p["step"] for p in shown], [p["ms"] for p in shown], s=14 if mode in ("eager", "compiled") else 10,
                   color=color, marker=marker, label=label if shown else None, zorder=3)
        clipped = [p for p in pts if p["ms"] > top]  # off the axis: a triangle on the top edge
        ax.scatter([p["step"] for p in clipped], [top] * len(clipped), marker="^", s=36, color=color, zorder=3,
                   clip_on=False, label=None if shown or label is None else label)
        any_clipped = any_clipped or bool(clipped)
    if any_clipped:
        ax.scatter([], [], marker="^", s=36, color="0.5", label="above the axis (top edge)")
    # The pairs' medians across the pairs (the table's eager and compiled step), the last-50 median
    # across those steps (the table's "step, last 50").
    left, right = (span[0] - 0.5, span[1] + 0.5) if span is not None else (points[0]["step"], points[-1]["step"])
    for mode, key in (("eager", "perf/eager_step_ms"), ("compiled", "perf/compiled_step_ms")):
        median = figures.get(key)
        if span is not None and isinstance(median, (int, float)) and median <= top:
            ax.hlines(median, left, right, color=_COLORS[mode], linestyles="--", linewidth=1.4,
                      label=f"{mode} median of the pairs: {median:.4g} ms", zorder=4)
    last = [p["step"] for p in points if p["mode"] == "compiled"][-50:]
    step_ms = figures.get("perf/step_ms")
    if last and isinstance(step_ms, (int, float)) and step_ms <= top:
        ax.hlines(step_ms, last[0], last[-1], color="tab:purple", linestyles=":", linewidth=1.6, zorder=4,
                  label=f"median of the last {len(last)} steps: {step_ms:.4g} ms")
    _mark_events(ax, figures, points, top)
    ax.set_ylim(0, top * 1.02)
    note = _memory_note(figures)
    ax.set_xlabel("step" + (f"\n{note}" if note else ""))
    ax.set_ylabel("step time [ms]")
    kind, sentence = speedup_verdict(figures)
    title = sentence[:1].upper() + sentence[1:] + "."
    ax.set_title(textwrap.fill(title, 110, break_long_words=False, break_on_hyphens=False), fontsize=9, loc="left")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _memory_note(figures: dict[str, Any]) -> str:
    """What held the step's memory: the loss (whole or chunked logits) and the peak, in a line (empty: neither)."""
    parts = []
    if "loss/chunked" in figures:
        chunked = figures["loss/chunked"]
        size = figures.get("loss/logits_gib")
        whole = f" ({size:.3g} GiB a step)" if isinstance(size, (int, float)) else ""
        chunks = counted(int(figures.get("loss/chunks") or 0), "chunk")
        parts.append(f"loss: {chunks} of {figures.get('loss/chunk_rows')} positions, never the whole logits{whole}"
                     if chunked else f"loss: from the whole logits{whole}")
    peak = figures.get("memory/peak_gib")
    if isinstance(peak, (int, float)):
        parts.append(f"peak memory {peak:.3g} GiB")
    return "; ".join(parts)


def _mark_events(ax: Any, figures: dict[str, Any], points: list[dict[str, Any]], top: float) -> None:
    """A vertical line per compile/recompile step, its compile time written on it (and the step's
    own time when that step is above the axis)."""
    step_ms = {p["step"]: p["ms"] for p in points}
    seen: set[str] = set()
    for step, kind, seconds in _events_by_step(figures):
        label = None if kind in seen else kind
        seen.add(kind)
        ax.axvline(step, color=_COLORS[kind], alpha=0.6, linewidth=1.2, label=label, zorder=2)
        text = f"{kind} {seconds:.3g} s"
        if step_ms.get(step, 0.0) > top:
            text += f" (step {step_ms[step] / 1000:.3g} s)"
        ax.annotate(text, (step, top), xytext=(3, -3), textcoords="offset points", rotation=90, va="top",
                    ha="left", fontsize=8, color=_COLORS[kind])


def plot_sweep(runs: list[dict[str, Any]], path: Path, panels: tuple[tuple[str, str], ...]) -> None:
    if runs:
        sweep_figure(runs, panels).savefig(path, dpi=110)


def sweep_figure(runs: list[dict[str, Any]], panels: tuple[tuple[str, str], ...]) -> Figure:
    """The figure of ``summary.png``: one panel per (key, label), one row per run (best on top), the
    value written on each bar; the speedup with its pairs' quartiles and a line at 1 (no gain)."""
    names = [r["job"] for r in runs]
    fig = _figure(figsize=(4.2 * len(panels) + 2, 0.55 * len(runs) + 1.6))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)
    for ax, (key, label) in zip(axes[0], panels, strict=True):
        values = [finite_number(r["figures"].get(key)) for r in runs]
        known = [v for v in values if v is not None]
        span = max([abs(v) for v in known] + [1.0 if key == "perf/speedup_x" else 0.0]) or 1.0
        for y, (run, value) in enumerate(zip(runs, values, strict=True)):
            if value is None:
                ax.text(0.02 * span, y, _missing(run["figures"], key), va="center", fontsize=8, color="0.4")
                continue
            ax.barh(y, value, color="tab:blue" if key != "compile/time_s" else "tab:green", alpha=0.8, height=0.6)
            lo, hi = (finite_number(run["figures"].get(q)) for q in ("perf/speedup_p25_x", "perf/speedup_p75_x"))
            end = value
            if key == "perf/speedup_x" and lo is not None and hi is not None:
                ax.errorbar(value, y, xerr=[[value - lo], [hi - value]], color="black", capsize=4, linewidth=1.2)
                span, end = max(span, hi), max(value, hi)  # the value is written past the whisker
            note = " (nothing compiled)" if key == "compile/time_s" and value == 0 else ""
            ax.text(end, y, f" {value:.3g}{note}", va="center", fontsize=8)
        if key == "perf/speedup_x":
            ax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
            ax.annotate("1x: as fast as eager", (1.0, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -10),
                        textcoords="offset points", fontsize=7, color="gray")
            ax.set_xlabel(f"{label} (bars: median of pairs; whiskers: 25th-75th pct.)")
        else:
            ax.set_xlabel(label)
        ax.set_xlim(0, span * 1.35)
    axes[0][0].set_yticks(range(len(runs)), names)
    axes[0][0].invert_yaxis()  # best run on top
    fig.tight_layout()
    return fig


def _missing(figures: dict[str, Any], key: str) -> str:
    """Why a run has no value for ``key``, written where its bar would be."""
    if key == "perf/speedup_x":
        why = missing_speedup(figures)
        return "nothing compiled: the eager baseline" if why == "nothing compiled" else why
    return "not measured"
