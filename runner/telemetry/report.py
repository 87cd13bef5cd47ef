"""The run report: ``report.json``, ``report.md``, ``step_times.png`` and a printed summary.

``figures`` is the flat dict :meth:`runner.telemetry.callback.CompileTelemetry.figures` returns:
scalar figures under namespaced keys with units (``compile/time_s``, ``perf/speedup_x``,
``memory/peak_gib``), plus a few list-valued keys:

* ``compile/recompile_reasons``: ``[{"name", "reason", "step", "fix"}]``
* ``compile/graph_break_reasons``: ``[{"reason", "user_frame", "count", "fix"}]``
* ``compile/events``: ``[{"kind", "name", "step", "duration_s"}]`` (compile starts, recompiles)
* ``perf/step_series``: ``[{"step", "ms", "mode", "timed"}]`` with mode ``compiled`` / ``eager`` /
  ``warmup`` / ``flops`` / ``compile``; ``timed`` false: host time of a step not waited for (GPU), not plotted.
  Past 4096 compiled steps, only those at multiples of ``perf/step_series_stride`` are kept

Every writer tolerates missing keys, so a partial figures dict (a run that crashed) still reports.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# Rows of the summary table, in order: (key, label). Keys absent from the figures are skipped.
SUMMARY_ROWS: tuple[tuple[str, str], ...] = (
    # what was trained, and how well
    ("run/steps", "steps"),
    ("run/wall_s", "wall time [s]"),
    ("train/loss", "train loss"),
    ("val/loss", "val loss"),
    ("val/bpb", "val bits per byte"),
    ("data/unigram_bpb", "  unigram entropy [bits/byte]"),
    # what the compile stack applied
    ("compile/scope", "compile scope"),
    ("compile/options", "  Inductor options"),
    ("compile/optimizer", "optimizer step"),
    ("dynamic/policy", "shape policy"),
    ("dynamic/padding_waste_pct", "  padding [% of tokens]"),
    ("offload/strategy", "saved activations"),
    ("offload/reduction_x", "  saved bytes reduction [x]"),
    ("offload/grad_rel_error", "  grad rel. error vs none"),
    ("cudagraphs/active", "CUDA graphs active"),
    # what compilation did, and what it bought
    ("compile/frames", "frames compiled"),
    ("compile/graphs", "graphs"),
    ("compile/recompiles", "recompiles"),
    ("compile/graph_breaks", "graph breaks"),
    ("compile/guards_total", "guards (total)"),
    ("compile/guards_max", "guards (max per entry)"),
    ("compile/time_s", "compile time [s]"),
    ("compile/dynamo_s", "  Dynamo [s]"),
    ("compile/aot_autograd_s", "  AOTAutograd [s]"),
    ("compile/inductor_s", "  Inductor [s]"),
    ("compile/cache_hits", "compile-cache hits"),
    ("compile/cache_misses", "compile-cache misses"),
    ("compile/cudagraph_skips", "CUDA-graph skips"),
    ("compile/fallbacks", "eager fallbacks"),
    ("perf/step_ms", "step [ms]"),
    ("perf/eager_step_ms", "eager step [ms]"),
    ("perf/compiled_step_ms", "compiled step [ms]"),
    ("perf/speedup_x", "speedup [x]"),
    ("perf/speedup_p25_x", "  speedup, 25th pct. of pairs [x]"),
    ("perf/speedup_p75_x", "  speedup, 75th pct. of pairs [x]"),
    ("perf/break_even_step", "break-even step"),
    ("perf/samples_per_s", "samples/s"),
    ("perf/tokens_per_s", "tokens/s"),
    ("perf/tflop_per_step", "TFLOP per step"),
    ("perf/mfu", "MFU"),
    ("perf/peak_tflops", "  device peak [TFLOP/s]"),
    ("perf/peak_source", "  peak source"),
    ("memory/peak_gib", "peak memory [GiB]"),
    ("trace/html", "compile report (tlparse)"),
)


def _fmt(value: Any) -> str:
    """Format a figure for humans: floats with 4 significant digits, NaN/None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return "-"
        return f"{value:.4g}"
    return str(value)


def _json_safe(value: Any) -> Any:
    """JSON has no NaN/inf: map them to None so any JSON reader accepts the report."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)  # e.g. a torch.dtype or Path slipped into the figures: keep it readable


def summary_rows(figures: dict[str, Any]) -> list[tuple[str, str]]:
    """The (label, formatted value) rows of the summary, for the table and ``report.md``."""
    rows = [(label, _fmt(figures[key])) for key, label in SUMMARY_ROWS if key in figures]
    # An infinite break-even step means the compiled step is not faster: it never pays off.
    if figures.get("perf/break_even_step") == math.inf:
        rows = [(label, "never") if label == "break-even step" else (label, v) for label, v in rows]
    return rows


def format_summary(figures: dict[str, Any], title: str = "compile telemetry") -> str:
    """Render the headline figures as a text table (rich, no colour codes) for printing."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for label, value in summary_rows(figures):
        # Text, not a markup string: labels contain "[s]" / "[x]", which rich would read as tags.
        table.add_row(Text(label), Text(value))
    # Render to a string (no terminal control codes), so the caller can print or log it.
    console = Console(width=80, record=True, force_terminal=False, color_system=None)
    with console.capture() as capture:
        console.print(table)
    text = capture.get()
    reasons = _reason_lines(figures)
    if reasons:
        text += "\n".join(reasons) + "\n"
    return text


def _fix(entry: dict[str, Any]) -> str:
    """The suggested fix of a reason entry (``runner.telemetry.advice``), as a suffix."""
    return f" Fix: {entry['fix']}" if entry.get("fix") else ""


def _reason_lines(figures: dict[str, Any], limit: int = 10) -> list[str]:
    """Recompile and graph-break reasons as short lines, the first ``limit`` of each."""
    lines: list[str] = []
    recompiles = figures.get("compile/recompile_reasons") or []
    if recompiles:
        lines.append("recompiles:")
        lines += [f"  - {r.get('name', '?')}: {r.get('reason', '?')}" + _fix(r) for r in recompiles[:limit]]
    breaks = figures.get("compile/graph_break_reasons") or []
    if breaks:
        lines.append("graph breaks:")
        lines += [
            f"  - {b.get('reason', '?')} at {b.get('user_frame') or '?'} (x{b.get('count', 1)})" + _fix(b)
            for b in breaks[:limit]
        ]
    return lines


def _rank_table(figures: dict[str, Any]) -> list[str]:
    """Per-rank figures of a multi-process run (one row per rank), if it gathered them."""
    keys = [k for k in figures if k.startswith("ranks/") and isinstance(figures[k], list)]
    if not keys:
        return []
    world = len(figures[keys[0]])
    agree = "the same on every rank" if figures.get("ranks/compiles_agree") else "NOT the same on every rank"
    out = ["", f"## Per rank ({world} ranks; graphs, recompiles and graph breaks {agree})", "",
           "| rank | " + " | ".join(k.removeprefix("ranks/") for k in keys) + " |",
           "|---:|" + "---:|" * len(keys)]
    out += [f"| {r} | " + " | ".join(_fmt(figures[k][r]) for k in keys) + " |" for r in range(world)]
    return out


def _markdown(figures: dict[str, Any]) -> str:
    """``report.md``: the summary table and every reason, in GitHub markdown."""
    out = ["# Run report", "", "| figure | value |", "|---|---:|"]
    out += [f"| {label.strip()} | {value} |" for label, value in summary_rows(figures)]
    recompiles = figures.get("compile/recompile_reasons") or []
    out += ["", f"## Recompiles ({len(recompiles)})", ""]
    out += [f"- `{r.get('name', '?')}` (step {r.get('step', '?')}): {r.get('reason', '?')}" + _fix(r)
            for r in recompiles]
    breaks = figures.get("compile/graph_break_reasons") or []
    out += ["", f"## Graph breaks ({len(breaks)})", ""]
    out += [f"- {b.get('reason', '?')} at `{b.get('user_frame') or '?'}` (x{b.get('count', 1)})" + _fix(b)
            for b in breaks]
    out += _rank_table(figures)
    if figures.get("trace/html"):
        out += ["", f"Every compile, in tlparse's report: [{figures['trace/html']}]({figures['trace/html']})"]
    elif figures.get("trace/status"):
        out += ["", f"Compile trace: {figures['trace/status']}"]
    out += ["", "![step times](step_times.png)", ""]
    return "\n".join(out)


def plot_step_times(figures: dict[str, Any], path: Path) -> bool:
    """Plot step time per step, coloured by mode, with compile/recompile events as vertical lines.

    Returns False (and writes nothing) when there are no step times to plot.
    """
    series = figures.get("perf/step_series") or []
    if not series:
        return False
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines; must precede pyplot's import
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for mode, color in (("warmup", "tab:gray"), ("compiled", "tab:blue"), ("eager", "tab:orange")):
        pts = [(p["step"], p["ms"]) for p in series if p.get("mode") == mode and p.get("timed", True)]
        if pts:
            ax.scatter([s for s, _ in pts], [m for _, m in pts], s=8, color=color, label=mode)
    for event in figures.get("compile/events") or []:
        step = event.get("step")
        if step is None or event.get("kind") == "cudagraph_recording":  # a recording is not a compile
            continue
        color = "tab:red" if event.get("kind") == "recompile" else "tab:green"
        ax.axvline(step, color=color, alpha=0.5, linewidth=1)
    ax.plot([], [], color="tab:green", label="compile")  # legend entries for the event lines
    ax.plot([], [], color="tab:red", label="recompile")
    ax.set_yscale("log")  # compile steps are 1000x a normal step: log keeps both readable
    ax.set_xlabel("step")
    ax.set_ylabel("step time [ms]")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write_report(run_dir: Path, figures: dict[str, Any]) -> None:
    """Write ``report.json`` (all figures and reasons), ``report.md`` and ``step_times.png``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "report.json").write_text(json.dumps(_json_safe(figures), indent=2, sort_keys=True) + "\n")
    plot_step_times(figures, run_dir / "step_times.png")
    (run_dir / "report.md").write_text(_markdown(figures))
