"""What a tune leaves: ``tune.{md,json}``, the sweep summary, each trial's ``tune/*`` figures in its
``report.json``, and the winner as a recipe file."""

from __future__ import annotations

import datetime
import json
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from runner.config.schema import RunConfig
from runner.config.tune import TuneConfig
from runner.telemetry.report import write_report
from runner.telemetry.sweep import CRITERIA, summarize_sweep
from runner.tune.space import KEYS, Space, param_overrides, recipe_groups

# The sweep's ranking with time per token in place of the speedup.
TUNE_CRITERIA: tuple[tuple[str, str, bool], ...] = (("time_per_token", "tune/us_per_token", False), *CRITERIA[1:])
TUNE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tune/us_per_token", "time/token [us]"),
    ("tune/speedup_vs_eager_x", "vs eager [x]"),
    ("compile/time_s", "compile [s]"),
    ("compile/recompiles", "recompiles"),
    ("perf/step_ms", "step [ms]"),
    ("memory/peak_gib", "peak [GiB]"),
    ("val/bpb", "val bits/byte"),
)


@dataclass
class TrialResult:
    """What one trial measured; ``error`` is set when its config was refused."""

    run_dir: Path
    us_per_token: float | None = None
    val_bpb: float | None = None
    compile_s: float | None = None
    pruned_at: int | None = None
    figures: dict[str, Any] | None = None
    error: str | None = None
    failed: bool = False  # The run raised (``error`` says what); else ``error`` is a refused config.


@dataclass
class TrialRow:

    number: int
    name: str
    params: dict[str, Any]
    run_dir: str
    state: str
    reason: str
    us_per_token: float | None
    val_bpb: float | None
    compile_s: float | None

    @classmethod
    def of(cls, number: int, name: str, params: dict[str, Any], result: TrialResult, state: str,
           reason: str = "") -> TrialRow:
        """A row from a trial's result; also records the row into the trial's own ``report.json``."""
        row = cls(number, name, dict(params), str(result.run_dir), state, reason, result.us_per_token,
                  result.val_bpb, result.compile_s)
        if result.figures is not None:  # tune/* into the report, the overrides where the sweep summary reads them
            result.figures.update({"tune/trial": number, "tune/state": state, "tune/reason": reason,
                                   "tune/us_per_token": result.us_per_token})
            write_report(result.run_dir, result.figures)
            (result.run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
            (result.run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(param_overrides(params)))
        return row

    def line(self) -> str:
        """``step/blocks ... 12.3 us/token, val 3.71 bits/byte, complete``."""
        us = "-" if self.us_per_token is None else f"{self.us_per_token:.2f} us/token"
        reason = f": {self.reason}" if self.reason else ""
        return f"{self.params} -> {us}, val bits/byte {_num(self.val_bpb)}, {self.state}{reason}"


def _ratio(slow: float | None, fast: float | None) -> float | None:
    return slow / fast if slow and fast else None


def _importances(study: Any) -> dict[str, float]:
    """Optuna's parameter importances (fANOVA) over the complete trials; {} when too few vary."""
    import optuna

    try:
        return {k: float(v) for k, v in optuna.importance.get_param_importances(study).items()}
    except (RuntimeError, ValueError, ZeroDivisionError):
        return {}


def write_outputs(study: Any, rows: list[TrialRow], base_cfg: RunConfig, run_overrides: list[str], cfg: TuneConfig,
                  tune_dir: Path, space: Space, wall_s: float) -> dict[str, Any]:
    """Rank, write everything, print the headline; the summary dict (as in ``tune.json``)."""
    eager = rows[0]
    default = next((r for r in rows if r.name == "default"), None)
    feasible = [r for r in rows[1:] if r.state == "complete" and r.us_per_token is not None]
    winner = min(feasible, key=lambda r: r.us_per_token or float("inf")) if feasible else None
    best_us = winner.us_per_token if winner else None
    device = base_cfg.trainer.single_device() if not base_cfg.trainer.is_distributed() else base_cfg.trainer.accelerator
    for r in rows:
        path = Path(r.run_dir) / "report.json"
        if path.is_file() and r.us_per_token:
            figures = json.loads(path.read_text())
            figures["tune/speedup_vs_eager_x"] = _ratio(eager.us_per_token, r.us_per_token)
            path.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    summary: dict[str, Any] = {
        "recipe": base_cfg.recipe, "device": f"{device} ({platform.processor() or platform.machine()})",
        "wall_s": round(wall_s, 1),
        "searched": space.choices, "not_searched": space.dropped, "loss_tolerance_bpb": cfg.loss_tolerance,
        "steps_per_trial": cfg.steps, "eager": asdict(eager), "default": asdict(default) if default else None,
        "winner": asdict(winner) if winner else None,
        "speedup_vs_default_x": _ratio(default.us_per_token if default else None, best_us),
        "speedup_vs_eager_x": _ratio(eager.us_per_token, best_us),
        "importances": _importances(study), "trials": [asdict(r) for r in rows],
        "study": f"sqlite:///{(tune_dir / 'study.db').resolve()}", "recipe_file": None,
    }
    if winner is not None:
        summary["recipe_file"] = str(write_recipe(winner, base_cfg, run_overrides, cfg, summary))
    (tune_dir / "tune.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (tune_dir / "tune.md").write_text(tune_markdown(summary))
    summarize_sweep(tune_dir, criteria=TUNE_CRITERIA, columns=TUNE_COLUMNS)
    print(tune_markdown(summary))
    print(f"tune: {tune_dir / 'tune.md'}; dashboard: optuna-dashboard {summary['study']}")
    return summary


def write_recipe(winner: TrialRow, base_cfg: RunConfig, run_overrides: list[str], cfg: TuneConfig,
                 summary: dict[str, Any]) -> Path:
    """``<recipe_dir>/<recipe>_tuned.yaml``: the base recipe with the winning choices on top. Choices a group option
    makes by itself are written as group selections; where the composed recipe would then differ from the winning
    trial's config, every choice is written as a field instead."""
    name = cfg.recipe_name or f"{base_cfg.recipe or 'run'}_tuned"
    path = Path(cfg.recipe_dir) / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    selections = recipe_groups(winner.params)
    path.write_text(_recipe_text(name, winner, base_cfg, run_overrides, cfg, summary, selections))
    if selections and not _composes_to_trial(path, name, winner, run_overrides):
        path.write_text(_recipe_text(name, winner, base_cfg, run_overrides, cfg, summary, {}))
    return path


def _recipe_text(name: str, winner: TrialRow, base_cfg: RunConfig, run_overrides: list[str], cfg: TuneConfig,
                 summary: dict[str, Any], selections: dict[str, str]) -> str:
    """The recipe file: ``selections`` (choice -> group option) in its defaults list, the other choices
    and the command line's field overrides in its body."""
    from omegaconf import OmegaConf

    base = base_cfg.recipe
    groups: dict[str, str] = {}
    fields: list[str] = []
    for o in run_overrides:  # group choices (compile=blocks) and field overrides (data.batch_size=2)
        key, eq, value = o.lstrip("+").partition("=")
        if eq and "." in key:
            fields.append(o.lstrip("+"))
        elif eq and key != "recipe":
            groups[key] = value
    groups.update({KEYS[choice].partition(".")[0]: option for choice, option in selections.items()})
    merged = OmegaConf.from_dotlist(fields)
    for choice, value in winner.params.items():
        if choice not in selections:  # the other choices as fields, over the command line's
            OmegaConf.update(merged, KEYS[choice], value)
    tree = OmegaConf.to_container(merged)
    defaults: list[Any] = ([base] if base else []) + [{f"override /{g}": v} for g, v in groups.items()] + ["_self_"]
    header = [
        "# @package _global_",
        f"# {base or 'the default job'} with the compile stack `runner tune` found fastest on {summary['device']}: "
        f"{_x(summary['speedup_vs_default_x'])} the default stack's speed, {_x(summary['speedup_vs_eager_x'])} "
        "eager's, per token.",
        f"# Written {datetime.date.today()} from {summary['study']} (trial {winner.number}); "
        f"val bits/byte {_num(winner.val_bpb)} vs eager {_num(summary['eager']['val_bpb'])} after {cfg.steps} steps.",
    ]
    body = yaml.safe_dump({"defaults": defaults, "recipe": name, **(tree if isinstance(tree, dict) else {})},
                          sort_keys=False)
    return "\n".join(header) + "\n" + body


def _composes_to_trial(path: Path, name: str, winner: TrialRow, run_overrides: list[str]) -> bool:
    """Whether ``+recipe=name`` composes to the winning trial's config (False: the recipe dir is not ``recipes``)."""
    from omegaconf import OmegaConf

    from runner.config import compose

    if path.parent.name != "recipes":
        return False
    tuned = compose([f"+recipe={name}"], config_dirs=[path.parent.parent])
    trial = compose([*run_overrides, *param_overrides(winner.params)])
    a, b = OmegaConf.to_container(tuned), OmegaConf.to_container(trial)
    assert isinstance(a, dict) and isinstance(b, dict)
    a.pop("recipe"), b.pop("recipe")
    return a == b


def _num(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def tune_markdown(summary: dict[str, Any]) -> str:
    """``tune.md``: winner, speedups, importances, every trial with its state and reason."""
    winner = summary["winner"]
    lines = [f"# Tune: {summary['recipe']} on {summary['device']}", "",
             f"Wall time {summary['wall_s']} s; {summary['steps_per_trial']} steps per trial; loss tolerance "
             f"{summary['loss_tolerance_bpb']} val bits/byte above eager.", ""]
    if winner:
        lines += [f"**Winner**: trial {winner['number']} `{' '.join(param_overrides(winner['params']))}`: "
                  f"{winner['us_per_token']:.3f} us/token, {_x(summary['speedup_vs_default_x'])} the default stack, "
                  f"{_x(summary['speedup_vs_eager_x'])} eager fp32. Recipe: `{summary['recipe_file']}`.", ""]
        if (summary["speedup_vs_eager_x"] or 0) < 1:
            lines += ["No searched stack was faster than eager fp32 here: `compile=eager` is the fastest choice "
                      "for this model on this machine (the recipe holds the fastest compiled stack).", ""]
    else:
        lines += ["**No winner**: no trial completed within the loss tolerance.", ""]
    if summary["importances"]:
        lines += ["Importance of each choice (Optuna, fANOVA): " +
                  ", ".join(f"{k} {v:.2f}" for k, v in summary["importances"].items()), ""]
    else:
        lines += ["Importance of each choice: not measurable, fewer than two complete trials to compare.", ""]
    if summary["not_searched"]:
        lines += ["Not searched: " + "; ".join(f"{k} ({v})" for k, v in summary["not_searched"].items()), ""]
    lines += ["| trial | stack | us/token | val bits/byte | compile s | state |", "|---|---|---:|---:|---:|---|"]
    for r in summary["trials"]:
        state = r["state"] + (f": {r['reason']}" if r["reason"] else "")
        lines.append(f"| {r['name']} | `{' '.join(param_overrides(r['params']))}` | {_num(r['us_per_token'], '.3f')} | "
                     f"{_num(r['val_bpb'])} | {_num(r['compile_s'], '.1f')} | {state} |")
    lines += ["", "Ranked runs: [summary.md](summary.md). Study: `optuna-dashboard " + summary["study"] + "`", ""]
    return "\n".join(lines)
