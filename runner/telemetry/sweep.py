"""Rank the runs of a Hydra multirun by what compilation bought: ``summary.{md,json,png}``.

:func:`summarize_sweep` reads every job's ``report.json`` under a sweep dir (and the job's
``.hydra/overrides.yaml``, to name it by its overrides) and ranks the runs by speedup (higher is
better), compile time, recompiles and peak memory (lower is better). :class:`SweepSummary` is the
Hydra callback that calls it at the end of a multirun (registered by ``conf/sweep/*.yaml``).

Every run logs the same keys, so wandb's dashboard can also compare the runs of a sweep side by side.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

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
    ("perf/step_ms", "step [ms]"),
    ("perf/break_even_step", "break-even step"),
    ("memory/peak_gib", "peak [GiB]"),
    ("offload/reduction_x", "saved activations reduction [x]"),
    ("val/bpb", "val bits/byte"),
)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _job_name(job_dir: Path, sweep_dir: Path) -> tuple[str, list[str]]:
    """A job is named by its overrides (``compile=step,offload=bf16``), else by its directory."""
    overrides_file = job_dir / ".hydra" / "overrides.yaml"
    overrides: list[str] = []
    if overrides_file.is_file():
        from omegaconf import OmegaConf

        loaded = OmegaConf.to_container(OmegaConf.load(overrides_file))
        overrides = [str(o) for o in loaded] if isinstance(loaded, list) else []
    return (",".join(overrides) or str(job_dir.relative_to(sweep_dir))), overrides


def _rank(runs: list[dict[str, Any]], key: str, higher_better: bool) -> list[str]:
    """Job names best first; runs without the figure come last, in directory order."""
    have = [r for r in runs if _number(r["figures"].get(key)) is not None]
    have.sort(key=lambda r: _number(r["figures"][key]) or 0.0, reverse=higher_better)
    return [r["job"] for r in have] + [r["job"] for r in runs if r not in have]


def _overall_key(run: dict[str, Any], criteria: tuple[tuple[str, str, bool], ...] = CRITERIA) -> tuple[float, ...]:
    """Speedup (descending), then compile time, recompiles, memory (ascending); missing last."""
    key: list[float] = []
    for _, figure, higher_better in criteria:
        value = _number(run["figures"].get(figure))
        key.append(math.inf if value is None else (-value if higher_better else value))
    return tuple(key)


def summarize_sweep(sweep_dir: Path, criteria: tuple[tuple[str, str, bool], ...] = CRITERIA,
                    columns: tuple[tuple[str, str], ...] = COLUMNS) -> dict[str, Any]:
    """Read every ``report.json`` under ``sweep_dir``, rank the runs, write ``summary.{json,md,png}``.
    ``criteria`` and ``columns`` replace the ranking and the table's columns (``runner tune`` ranks by
    time per token).

    Returns ``{"runs": [...best first...], "rankings": {criterion: [job, ...]}, "best": job | None}``;
    runs are ordered by speedup, ties broken by compile time, recompiles and memory.
    """
    sweep_dir = Path(sweep_dir)
    runs: list[dict[str, Any]] = []
    for report in sorted(sweep_dir.rglob("report.json")):
        try:
            figures = json.loads(report.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # a job that crashed while writing: skip it, rank the rest
        job, overrides = _job_name(report.parent, sweep_dir)
        runs.append({"job": job, "dir": str(report.parent), "overrides": overrides, "figures": figures})
    # Overrides every job shares (+recipe=..., trainer.max_steps=...) say nothing about which is which:
    # each job is named by the ones that differ, and the shared ones head the summary.
    shared = [o for o in runs[0]["overrides"] if all(o in r["overrides"] for r in runs)] if len(runs) > 1 else []
    for r in runs:
        distinct = [o for o in r["overrides"] if o not in shared]
        if distinct:
            r["job"] = ",".join(distinct)
    rankings = {name: _rank(runs, key, higher) for name, key, higher in criteria}
    position = {name: {job: i for i, job in enumerate(order)} for name, order in rankings.items()}
    runs.sort(key=lambda r: _overall_key(r, criteria))
    for r in runs:
        r["ranks"] = {name: position[name][r["job"]] + 1 for name, _, _ in criteria}
    summary = {"runs": runs, "rankings": rankings, "best": runs[0]["job"] if runs else None, "shared": shared,
               "columns": [list(c) for c in columns]}
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "summary.json").write_text(json.dumps(_json_safe(summary), indent=2) + "\n")
    (sweep_dir / "summary.md").write_text(summary_markdown(summary))
    _plot(runs, sweep_dir / "summary.png", panels=(columns[0], ("compile/time_s", "compile [s]")))
    return summary


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def summary_markdown(summary: dict[str, Any]) -> str:
    """The ranked table of a sweep, best run first."""

    def cell(value: Any) -> str:
        number = _number(value)
        return "-" if number is None else f"{number:.4g}"

    columns = [tuple(c) for c in summary.get("columns") or COLUMNS]
    header = "| # | run | " + " | ".join(label for _, label in columns) + " |"
    lines = ["# Sweep summary", ""]
    if summary.get("shared"):
        lines += ["Every run: `" + " ".join(summary["shared"]) + "`", ""]
    lines += [header, "|" + "---|" * (len(columns) + 2)]
    for i, run in enumerate(summary["runs"], 1):
        values = " | ".join(cell(run["figures"].get(key)) for key, _ in columns)
        lines.append(f"| {i} | `{run['job']}` | {values} |")
    order = [name.replace("_", " ") for name in summary["rankings"]]
    lines += ["", f"Ranked by {order[0]}, then {', '.join(order[1:])}." if order else "", ""]
    for name, order in summary["rankings"].items():
        lines.append(f"- best {name}: `{order[0]}`" if order else f"- best {name}: -")
    lines += ["", "![summary](summary.png)", ""]
    return "\n".join(lines)


def _plot(runs: list[dict[str, Any]], path: Path,
          panels: tuple[tuple[str, str], ...] = (("perf/speedup_x", "speedup [x]"), ("compile/time_s", "compile [s]")),
          ) -> None:
    """Speedup (or the ranking's first column) and compile time per run, side by side."""
    if not runs:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["job"] for r in runs]
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.5 * len(runs) + 1.5), sharey=True)
    for ax, (key, label) in zip(axes, panels, strict=True):
        ax.barh(names, [_number(r["figures"].get(key)) or 0.0 for r in runs])
        ax.set_xlabel(label)
    if panels[0][0] == "perf/speedup_x":
        axes[0].axvline(1.0, color="gray", linestyle="--", linewidth=1)  # speedup 1 = no gain
    axes[0].invert_yaxis()  # best run on top
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class SweepSummary(Callback):
    """Hydra callback: after a multirun, write the ranked summary into the sweep dir."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Summarize ``hydra.sweep.dir`` and print the table."""
        sweep_dir = Path(str(config.hydra.sweep.dir))
        summary = summarize_sweep(sweep_dir)
        print(summary_markdown(summary))
        print(f"sweep summary: {sweep_dir / 'summary.md'}")
