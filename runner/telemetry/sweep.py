"""Rank the runs of a Hydra multirun: ``summary.{md,json,png}``.

Jobs that differ only in the compile stack train alike, so the speedup ranks first; jobs that differ in anything
else are ranked by the validation figures first. The summary says when the best run is not measurably better."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from runner.telemetry.definitions import FIGURES
from runner.telemetry.plots import plot_sweep
from runner.telemetry.report import json_safe
from runner.telemetry.verdict import break_even_cell, finite_number, missing_speedup, speedup_verdict

# (criterion, report key, higher is better)
CRITERIA: tuple[tuple[str, str, bool], ...] = (
    ("speedup", "perf/speedup_x", True),
    ("compile_time", "compile/time_s", False),
    ("recompiles", "compile/recompiles", False),
    ("memory", "memory/peak_gib", False),
)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("perf/speedup_x", "speedup [x]"),
    ("compile/time_s", "compile [s]"),
    ("compile/recompiles", "recompiles"),
    ("compile/graph_breaks", "graph breaks"),
    ("perf/step_ms", "step, last 50 [ms]"),
    ("perf/break_even_step", "break-even step"),
    ("memory/peak_gib", "peak [GiB]"),
    ("offload/reduction_x", "saved activations reduction [x]"),
)
# The compile stack's own config groups (conf/compile, dynamic, offload, cudagraphs): jobs that differ in these alone
# train alike.
STACK_GROUPS = ("compile", "dynamic", "offload", "cudagraphs")


def _overall_key(run: dict[str, Any], criteria: tuple[tuple[str, str, bool], ...]) -> tuple[float, ...]:
    """The run's place by ``criteria`` (CRITERIA: speedup descending, then compile time, recompiles, memory
    ascending); missing last (a stable sort: in directory order)."""
    key: list[float] = []
    for _, figure, higher_better in criteria:
        value = finite_number(run["figures"].get(figure))
        key.append(math.inf if value is None else (-value if higher_better else value))
    return tuple(key)


def objective_figures(runs: list[dict[str, Any]]) -> tuple[tuple[tuple[str, str, bool], ...],
                                                            tuple[tuple[str, str], ...]]:
    """The criteria and columns of what the runs minimised: a preference objective's accuracy and loss, else
    bits per byte, else the loss."""
    if any("objective/loss" in r["figures"] for r in runs):
        return ((("val_rewards/accuracies", "val/rewards/accuracies", True), ("val_loss", "val/loss", False)),
                (("val/rewards/accuracies", "val rewards/accuracies"), ("val/loss", "val loss")))
    if any(finite_number(r["figures"].get("val/bpb")) is not None for r in runs):
        return (("val_bits/byte", "val/bpb", False),), (("val/bpb", "val bits/byte"),)
    return (("val_loss", "val/loss", False),), (("val/loss", "val loss"),)


def summarize_sweep(sweep_dir: Path, criteria: tuple[tuple[str, str, bool], ...] | None = None,
                    columns: tuple[tuple[str, str], ...] | None = None) -> dict[str, Any]:
    """Read every ``report.json`` under ``sweep_dir``, rank the runs, write ``summary.{json,md,png}``; the summary.
    ``criteria``/``columns`` replace the ranking and the table (``runner tune`` ranks by time per token)."""
    sweep_dir = Path(sweep_dir)
    runs: list[dict[str, Any]] = []
    for report in sorted(sweep_dir.rglob("report.json")):
        try:
            figures = json.loads(report.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # a job that crashed while writing: skip it, rank the rest
        # A job is named by its overrides (compile=step,offload=bf16), else by its directory.
        overrides_file = report.parent / ".hydra" / "overrides.yaml"
        loaded = yaml.safe_load(overrides_file.read_text()) if overrides_file.is_file() else []
        overrides = [str(o) for o in loaded] if isinstance(loaded, list) else []
        job = ",".join(overrides) or str(report.parent.relative_to(sweep_dir))
        runs.append({"job": job, "dir": str(report.parent), "overrides": overrides, "figures": figures})
    # Overrides every job shares (+recipe=..., trainer.max_steps=...) say nothing about which is which:
    # each job is named by the ones that differ, and the shared ones head the summary.
    shared = [o for o in runs[0]["overrides"] if all(o in r["overrides"] for r in runs)] if len(runs) > 1 else []
    distinct = []
    for r in runs:
        distinct += (own := [o for o in r["overrides"] if o not in shared])
        if own:
            r["job"] = ",".join(own)
    if criteria is None or columns is None:
        own_criteria, own_columns = objective_figures(runs)
        # The overrides that tell the jobs apart are all the compile stack's: the same training, so what compiling
        # bought ranks, the figures are only shown.
        alike = all(o.lstrip("+~").split("=")[0].split(".")[0] in STACK_GROUPS for o in distinct)
        criteria = criteria or (CRITERIA if alike else (*own_criteria, *CRITERIA))
        columns = columns or ((*COLUMNS, *own_columns) if alike else (*own_columns, *COLUMNS))
    rankings = {name: [r["job"] for r in sorted(runs, key=lambda r: _overall_key(r, ((name, key, higher),)))]
                for name, key, higher in criteria}
    position = {name: {job: i for i, job in enumerate(order)} for name, order in rankings.items()}
    runs.sort(key=lambda r: _overall_key(r, criteria))
    for r in runs:
        r["ranks"] = {name: position[name][r["job"]] + 1 for name, _, _ in criteria}
    summary = {"runs": runs, "rankings": rankings, "best": runs[0]["job"] if runs else None, "shared": shared,
               "columns": [list(c) for c in columns], "criteria": [list(c) for c in criteria],
               "notes": noise_notes(runs, criteria[0][1])}
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "summary.json").write_text(json.dumps(json_safe(summary), indent=2) + "\n")
    (sweep_dir / "summary.md").write_text(summary_markdown(summary))
    # The picture's panels: the ranking's first column, the steady step time, the compile time.
    panels: dict[str, str] = {}
    for key, label in (columns[0], ("perf/step_ms", "step, last 50 [ms]"), ("compile/time_s", "compile [s]")):
        panels.setdefault(key, label)
    plot_sweep(runs, sweep_dir / "summary.png", panels=tuple(panels.items()))
    return summary


def _quartiles(figures: dict[str, Any]) -> tuple[float, float] | None:
    lo, hi = finite_number(figures.get("perf/speedup_p25_x")), finite_number(figures.get("perf/speedup_p75_x"))
    return (lo, hi) if lo is not None and hi is not None else None


def noise_notes(runs: list[dict[str, Any]], key: str) -> list[str]:
    """Sentences saying when the best run's lead is inside the noise of the pairs' quartiles: the
    best speedup's range includes 1, or its range overlaps the next runs' ranges."""
    if key != "perf/speedup_x":
        return []
    measured = [r for r in runs if finite_number(r["figures"].get(key)) is not None]
    if not measured:
        return ["No run measured a speedup."]
    best = measured[0]
    kind, sentence = speedup_verdict(best["figures"])
    notes = []
    if kind != "faster":
        notes.append(f"No run's compiled steps were measurably faster than eager. The highest speedup, "
                     f"`{best['job']}`: {sentence}.")
    spread = _quartiles(best["figures"])
    close = [r["job"] for r in measured[1:]
             if spread is not None and (q := _quartiles(r["figures"])) is not None and q[1] >= spread[0]]
    if close:
        notes.append(f"`{best['job']}` leads by less than the noise: its pairs' 25th to 75th percentile overlaps "
                     "that of " + ", ".join(f"`{job}`" for job in close) + ", so their order is not measured.")
    return notes


def _cell(key: str, figures: dict[str, Any]) -> str:
    if key == "perf/break_even_step":
        return break_even_cell(figures)
    number = finite_number(figures.get(key))
    if number is None:
        return missing_speedup(figures) if key == "perf/speedup_x" else "-"
    if key == "perf/speedup_x" and (q := _quartiles(figures)) is not None:
        return f"{number:.4g} ({q[0]:.3g} to {q[1]:.3g})"
    return f"{number:.4g}"


def _best_line(name: str, key: str, higher: bool, order: list[str], runs: list[dict[str, Any]]) -> str:
    """``- highest speedup: `job` (1.4)``; a run without the figure is never called the best."""
    word = "highest" if higher else "lowest"
    figures = {r["job"]: r["figures"] for r in runs}
    if not order or finite_number(figures[order[0]].get(key)) is None:
        return f"- {word} {name}: - (no run measured it)"
    return f"- {word} {name}: `{order[0]}`, {_cell(key, figures[order[0]])}"


def summary_markdown(summary: dict[str, Any]) -> str:
    """The ranked table of a sweep, best run first, with what each column means and how sure the
    ranking is."""
    columns = [tuple(c) for c in summary.get("columns") or COLUMNS]
    criteria = {name: (key, higher) for name, key, higher in (summary.get("criteria") or CRITERIA)}
    header = "| # | run | " + " | ".join(label for _, label in columns) + " |"
    lines = ["# Sweep summary", ""]
    if summary.get("shared"):
        lines += ["Every run: `" + " ".join(summary["shared"]) + "`", ""]
    lines += [header, "|" + "---|" * (len(columns) + 2)]
    for i, run in enumerate(summary["runs"], 1):
        values = " | ".join(_cell(key, run["figures"]) for key, _ in columns)
        lines.append(f"| {i} | `{run['job']}` | {values} |")
    order = [name.replace("_", " ") for name in summary["rankings"]]
    lines += ["", f"Ranked by {order[0]}, then {', '.join(order[1:])}." if order else "", ""]
    for name, ranked in summary["rankings"].items():
        key, higher = criteria.get(name, ("", True))
        lines.append(_best_line(name.replace("_", " "), key, higher, ranked, summary["runs"]))
    if summary.get("notes"):
        lines += ["", *summary["notes"]]
    lines += ["", "What the columns measure:", ""]
    lines += [f"- **{label}**: {FIGURES[key].meaning}" for key, label in columns if key in FIGURES]
    lines += ["", "![summary](summary.png)", ""]
    return "\n".join(lines)


class SweepSummary(Callback):
    """Hydra callback: after a multirun, write and print the ranked summary of ``hydra.sweep.dir``."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        summary = summarize_sweep(sweep_dir)
        print(summary_markdown(summary))
        print(f"sweep summary: {sweep_dir / 'summary.md'}")
