"""Where telemetry goes: every Lightning logger, the wandb reasons table (wandb imported only when a
``WandbLogger`` is present) and ``compile_events.txt``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from runner.figures.compile_work import (
    COMPILE_EVENTS,
    COMPILE_FALLBACK_REASONS,
    COMPILE_GRAPH_BREAK_REASONS,
    COMPILE_REASONS,
    COMPILE_RECOMPILE_REASONS,
)
from runner.strategy.progress_sink import progress_sink  # noqa: F401  (where compile progress prints)


def scalars(figures: dict[str, Any]) -> dict[str, float]:
    """The loggable part of the figures: finite numbers (bools as 0/1); lists and None dropped."""
    out: dict[str, float] = {}
    for key, value in figures.items():
        if isinstance(value, bool) or (isinstance(value, (int, float)) and math.isfinite(value)):
            out[key] = float(value)
    return out


def log_scalars(trainer: pl.Trainer, metrics: dict[str, float], step: int) -> None:
    """Send ``metrics`` to every logger of the trainer (loggers are rank-zero-only themselves)."""
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=step)


def _with_fix(entry: dict[str, Any]) -> str:
    fix = entry.get("fix")
    return f"{entry.get('reason')} | fix: {fix}" if fix else str(entry.get("reason"))


def reason_rows(figures: dict[str, Any]) -> list[list[Any]]:
    """One row per recompile, graph-break site and eager fallback: kind, name, location, step, count, reason."""
    rows: list[list[Any]] = []
    for r in figures.get(COMPILE_RECOMPILE_REASONS) or []:
        rows.append(["recompile", r.get("name"), r.get("location"), r.get("step"), 1, _with_fix(r)])
    for b in figures.get(COMPILE_GRAPH_BREAK_REASONS) or []:
        rows.append(["graph_break", None, b.get("user_frame"), None, b.get("count"), _with_fix(b)])
    for f in figures.get(COMPILE_FALLBACK_REASONS) or []:
        rows.append(["fallback", f.get("name"), None, None, 1, f.get("reason")])
    return rows


def log_reason_table(trainer: pl.Trainer, figures: dict[str, Any]) -> None:
    """Reasons as a ``wandb.Table`` on every WandbLogger (none: nothing, and wandb is not imported)."""
    from lightning.pytorch.loggers import WandbLogger

    wandb_loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
    if not wandb_loggers:
        return
    import wandb

    columns = ["kind", "name", "location", "step", "count", "reason"]
    for logger in wandb_loggers:
        table = wandb.Table(columns=list[Any](columns), data=[[_cell(v) for v in row] for row in reason_rows(figures)])
        logger.experiment.log({COMPILE_REASONS: table})


def _cell(value: Any) -> Any:
    # wandb.Table wants one type per column; None would make "step"/"count" mixed-type.
    return "" if value is None else value


def write_events_text(path: Path, figures: dict[str, Any]) -> None:
    """``compile_events.txt``: every compile event with its step and duration, then every reason."""
    lines = ["# compile events: step, kind, seconds, name"]
    for e in figures.get(COMPILE_EVENTS) or []:
        lines.append(f"step {e.get('step')}\t{e.get('kind')}\t{e.get('duration_s', 0.0):.2f} s\t{e.get('name')}")
    lines += ["", "# reasons: kind, name, location, step, count, reason"]
    for row in reason_rows(figures):
        kind, name, location, step, count, reason = row
        lines.append(f"{kind}\t{name or '-'}\t{location or '-'}\tstep {step}\tx{count}\n    {reason}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
