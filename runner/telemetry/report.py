"""The run report: ``report.json``, ``report.md``, ``step_times.png`` and the printed summary. Every writer
tolerates missing keys, so a run that crashed still reports."""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path
from typing import Any

from runner.metrics import RANKS, counted
from runner.telemetry.advice import RUNNERS_OPTIMIZER_STEP, fix_label, runners_breaks
from runner.telemetry.definitions import FIGURES, SECTIONS, TIMING_LEGEND
from runner.telemetry.plots import plot_step_times
from runner.telemetry.verdict import break_even_cell, break_even_text, missing_speedup, speedup_verdict


def _fmt(value: Any) -> str:
    """Format a figure for humans: floats with 4 significant digits, NaN/None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else "-"
    if isinstance(value, dict):  # counts by name (data/label_counts): the first few, then how many more
        shown = ", ".join(f"{k} {_fmt(v)}" for k, v in list(value.items())[:6])
        return shown + (f" (+{len(value) - 6} more)" if len(value) > 6 else "")
    return str(value)


def json_safe(value: Any) -> Any:
    """JSON has no NaN/inf: map them to None so any JSON reader accepts the report (the break-even
    step is written ``"never"`` by :func:`write_report`, as everywhere else)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    # Anything else (a torch.dtype or Path slipped into the figures) as text: kept readable.
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def _cell(key: str, figures: dict[str, Any]) -> str:
    """One figure as shown: the speedup with its quartiles, the break-even step as a number or
    ``never``, a missing speedup as why it is missing."""
    if key == "perf/break_even_step":
        return break_even_cell(figures)
    if key == "perf/speedup_x":
        value = _fmt(figures["perf/speedup_x"])
        if "perf/speedup_p25_x" in figures and "perf/speedup_p75_x" in figures:
            value += f" ({_fmt(figures['perf/speedup_p25_x'])} to {_fmt(figures['perf/speedup_p75_x'])})"
        return value
    if key == "compile/graph_breaks" and (runners := runners_breaks(figures)):
        return f"{_fmt(figures[key])} ({runners} {RUNNERS_OPTIMIZER_STEP})"
    if key == "perf/speedup_steps" and figures.get("perf/speedup_pairs"):
        text = f"{figures[key]} ({counted(int(figures['perf/speedup_pairs']), 'pair')})"
        resumed = figures.get("perf/speedup_status") == "measured before the resume"
        return text + (", before the resume" if resumed else "")
    if key == "cudagraphs/partitions_graphed":
        # N of M partitions in CUDA graphs, all when nothing runs eagerly, and a word on graphs the compile cache
        # supplied (their partitions were decided by the process that compiled them, not counted here).
        graphed, total = figures[key], figures.get("cudagraphs/partitions")
        text = f"{graphed} of {total}" + (" (all)" if graphed == total else "")
        return text + ("; cached graphs not counted" if figures.get("compile/cache_hits") else "")
    if key == "run/hub":  # each name at its commit, once (data.tokenizer reads the model's repo)
        return ", ".join(dict.fromkeys(f"{h['name']}@{h['commit'][:12]}" for h in figures[key]))
    return _fmt(figures[key])


def summary_sections(figures: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """``(section, [(label, shown value), ...])`` of the summary, for the table and ``report.md``."""
    out = []
    for title, section in SECTIONS:
        # A run without a speedup says so on the speedup row instead of leaving it out.
        rows = [(f.label, _cell(f.key, figures) if f.key in figures else missing_speedup(figures)) for f in section
                if f.key in figures or (f.key == "perf/speedup_x" and "perf/speedup_status" in figures)]
        if rows:
            out.append((title, rows))
    return out


def summary_rows(figures: dict[str, Any]) -> list[tuple[str, str]]:
    return [row for _, rows in summary_sections(figures) for row in rows]


def format_summary(figures: dict[str, Any], title: str = "compile telemetry") -> str:
    """Render the headline figures as a text table (rich, no colour codes) for printing, followed by
    the result in one sentence, what the timing rows measure, and the recompile/graph-break reasons."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for i, (section, rows) in enumerate(summary_sections(figures)):
        if i:
            table.add_section()
        table.add_row(Text(section, style="bold"), Text(""))
        for label, value in rows:
            # Text, not a markup string: labels contain "[s]" / "[x]", which rich would read as tags.
            table.add_row(Text(label), Text(value))
    # Render to a string (no terminal control codes), so the caller can print or log it.
    console = Console(width=100, record=True, force_terminal=False, color_system=None)
    with console.capture() as capture:
        console.print(table)
    # Under the table: the result in one sentence, then what the timing rows measure.
    lines = textwrap.wrap(f"result: {speedup_verdict(figures)[1]}.", 100, subsequent_indent="  ")
    shown = {label for label, _ in summary_rows(figures)}
    for f in FIGURES.values():
        if f.label in TIMING_LEGEND and f.label in shown:
            lines += textwrap.wrap(f"{f.label.strip()}: {f.meaning}", 100, initial_indent="  ",
                                   subsequent_indent="    ")
    lines += ["  every figure: report.md in the run directory", *_reason_lines(figures)]
    return capture.get() + "".join(line + "\n" for line in lines)


def _fix(entry: dict[str, Any]) -> str:
    """The suggested fix of a reason entry (``runner.telemetry.advice``), as a suffix; runner's own graph
    breaks (in the optimizer step it compiled) say why they are expected instead."""
    return f" {fix_label(entry.get('user_frame'))}: {entry['fix']}" if entry.get("fix") else ""


def eager_reason_text(entry: dict[str, Any]) -> str:
    """One reason nodes stay out of CUDA graphs: how many, torch's reason, an example, where, the fix."""
    graphs = entry.get("graphs") or []
    where = ", ".join(graphs[:4]) + (f" and {len(graphs) - 4} more" if len(graphs) > 4 else "")
    return (f"{entry.get('nodes', '?')} nodes: {entry.get('reason', '?')} (e.g. {entry.get('example', '?')}; "
            f"{where}). Fix: {entry.get('fix', '?')}")


def _reason_lines(figures: dict[str, Any], limit: int = 10) -> list[str]:
    """Recompile and graph-break reasons as short lines, the first ``limit`` of each."""
    lines: list[str] = []
    recompiles = figures.get("compile/recompile_reasons") or []
    if recompiles:
        lines.append("recompiles:")
        lines += [f"  - {r.get('name', '?')}: {r.get('reason', '?')}" + _fix(r) for r in recompiles[:limit]]
    eager = figures.get("cudagraphs/eager_reasons") or []
    if eager:
        lines.append("not in CUDA graphs (run eagerly between the recorded partitions):")
        lines += [f"  - {eager_reason_text(e)}" for e in eager[:limit]]
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
    keys = [k for k in figures if k.startswith(RANKS) and isinstance(figures[k], list)]
    if not keys:
        return []
    world = len(figures[keys[0]])
    agree = "the same on every rank" if figures.get("ranks/compiles_agree") else "NOT the same on every rank"
    out = ["", f"## Per rank ({world} ranks; graphs, recompiles and graph breaks {agree})", "",
           "| rank | " + " | ".join(k.removeprefix(RANKS) for k in keys) + " |",
           "|---:|" + "---:|" * len(keys)]
    out += [f"| {r} | " + " | ".join(_fmt(figures[k][r]) for k in keys) + " |" for r in range(world)]
    return out


def _sample(figures: dict[str, Any]) -> list[str]:
    """A causal LM's text at the end of the fit (``run/sample``), fenced so that nothing in it reads as markdown."""
    text = figures.get("run/sample")
    if not text:
        return []
    text = "".join(c if c in "\n\t" or c.isprintable() else "\ufffd" for c in text)  # no control bytes in the page
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return ["", "## Sample", "", "What the trained model writes (after.sample_tokens=0 turns this off; more with "
            "`python -m runner generate RUN_DIR --prompt TEXT`):", "", fence, text, fence]


def _markdown(figures: dict[str, Any]) -> str:
    """``report.md``: the result, the summary table with what each figure measures, every reason."""
    _, sentence = speedup_verdict(figures)
    out = ["# Run report", "", f"**Result:** {sentence[:1].upper() + sentence[1:]}.", ""]
    meaning = {f.label: f.meaning for f in FIGURES.values()}
    for section, rows in summary_sections(figures):
        out += [f"| {section} | value | what it measures |", "|---|---:|---|"]
        out += [f"| {label.strip()} | {value} | {meaning.get(label, '')} |" for label, value in rows]
        out.append("")
    out.append("Every figure, its steps and its key in report.json: docs/report.md in runner's repository.")
    recompiles = figures.get("compile/recompile_reasons") or []
    out += ["", f"## Recompiles ({len(recompiles)})", ""]
    out += [f"- `{r.get('name', '?')}` (step {r.get('step', '?')}): {r.get('reason', '?')}" + _fix(r)
            for r in recompiles]
    eager = figures.get("cudagraphs/eager_reasons") or []
    if eager:
        out += ["", "## Not in CUDA graphs", ""]
        out += [f"- {line}" for line in map(eager_reason_text, eager)]
    breaks = figures.get("compile/graph_break_reasons") or []
    out += ["", f"## Graph breaks ({len(breaks)})", ""]
    out += [f"- {b.get('reason', '?')} at `{b.get('user_frame') or '?'}` (x{b.get('count', 1)})" + _fix(b)
            for b in breaks]
    out += _rank_table(figures)
    out += _sample(figures)
    if figures.get("trace/html"):
        out += ["", f"Every compile, in tlparse's report: [{figures['trace/html']}]({figures['trace/html']})"]
    elif figures.get("trace/status"):
        out += ["", f"Compile trace: {figures['trace/status']}"]
    out += ["", "![step times](step_times.png)", ""]
    return "\n".join(out)


def write_report(run_dir: Path, figures: dict[str, Any]) -> None:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stored = dict(figures)
    if break_even_text(figures) == "never":  # not null: null would read as "not measured"
        stored["perf/break_even_step"] = "never"
    (run_dir / "report.json").write_text(json.dumps(json_safe(stored), indent=2, sort_keys=True) + "\n")
    plot_step_times(figures, run_dir / "step_times.png")
    (run_dir / "report.md").write_text(_markdown(figures))
