"""Whole-process wall time of ``python -m runner +recipe=quickstart`` with a cold compile cache: eager
Lightning, runner compiling first, and runner compiling beside the run (``compile.background``).

    .venv/bin/python benchmarks/background_compile.py                  # 3 rounds, the quickstart's 300 steps
    .venv/bin/python benchmarks/background_compile.py --rounds 2 --steps 150 --skip shared   # a reduced run
    .venv/bin/python benchmarks/background_compile.py --quick          # seconds: the smoke recipe (the test)

Method: each contestant is one ``python -m runner`` process (through a thin wrapper that also records
when the first training step finished) with its own fresh, empty ``TORCHINDUCTOR_CACHE_DIR`` (cold, the
compile process beside it included) and its own run directory. One process at a time, so contestants
never share the cores; in each of ``--rounds`` rounds every contestant runs once, the order rotated
round to round so a drift of the machine's load hits every contestant alike. Reported per contestant:
the median over rounds of the whole-process wall time (start to exit) and of the time to the first
finished step, and the median of the per-round ratios to eager Lightning (the same round's eager run);
what the compile beside the run did (its outcome, its time, the switch step), from each run's
report.json; the load average before and after each run. Writes ``benchmarks/results/background_compile.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "results" / "background_compile.json"

CONTESTANTS: dict[str, tuple[str, list[str]]] = {
    "eager": ("eager Lightning (compile=eager)", ["compile=eager"]),
    "first": ("runner, compiling first", ["compile.background=disabled"]),
    "pinned": ("runner, beside, pinned to one core", ["compile.background=pinned"]),
    "shared": ("runner, beside, every core", ["compile.background=shared"]),
    "auto": ("runner's default (compile.background=auto)", []),
}


def _child(out: str, overrides: list[str]) -> None:
    """One contestant's process: ``python -m runner`` plus a callback that writes when step 1 ended."""
    import lightning as L

    import runner.build as build
    from runner.__main__ import main

    class FirstStep(L.Callback):
        def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
            if not Path(out).exists():
                Path(out).write_text(json.dumps({"first_step_end": time.time()}))

    plain = build.build_callbacks
    build.build_callbacks = lambda cfg: [*plain(cfg), FirstStep()]  # type: ignore[assignment]
    sys.argv = ["runner", *overrides]
    main()


def _load() -> float:
    return os.getloadavg()[0]


def run_one(name: str, recipe: list[str], extra: list[str], root: Path, round_: int) -> dict[str, Any]:
    """Run one contestant in a fresh process with a cold cache; its times and report figures."""
    work = root / f"{name}-{round_}"
    work.mkdir(parents=True)
    marker = work / "first_step.json"
    overrides = [*recipe, *CONTESTANTS[name][1], *extra, f"hydra.run.dir={work / 'run'}",
                 "trainer.enable_progress_bar=false"]
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor_cache"), "PYTHONPATH": str(ROOT)}
    load_before = _load()
    start = time.time()
    proc = subprocess.run([sys.executable, __file__, "--child", str(marker), "--", *overrides], cwd=work,
                          env=env, capture_output=True, text=True, check=False)
    wall = time.time() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    report = json.loads((work / "run" / "report.json").read_text())
    first = json.loads(marker.read_text())["first_step_end"] - start
    keys = ("compile/background_outcome", "compile/background_s", "compile/switch_step", "compile/time_s",
            "compile/cache_hits", "compile/background_speedup_x", "compile/background_switch_s",
            "compile/eager_step_beside_ms", "perf/step_ms", "perf/speedup_x", "run/wall_s", "train/loss", "val/loss")
    return {"wall_s": wall, "first_step_s": first, "load_before": load_before, "load_after": _load(),
            **{k: report.get(k) for k in keys}}


def _cpu_model() -> str:
    """lscpu's model name (from /proc/cpuinfo)."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.processor())


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(rounds: list[dict[str, dict[str, Any]]], names: list[str]) -> list[dict[str, Any]]:
    """Per contestant: medians over rounds, and the median of per-round ratios to that round's eager run."""
    rows = []
    for name in names:
        runs = [r[name] for r in rounds]
        row: dict[str, Any] = {"name": name, "label": CONTESTANTS[name][0],
                               "wall_s": _median([r["wall_s"] for r in runs]),
                               "first_step_s": _median([r["first_step_s"] for r in runs])}
        if "eager" in names:
            row["wall_vs_eager"] = _median([r[name]["wall_s"] / r["eager"]["wall_s"] for r in rounds])
            row["first_vs_eager"] = _median([r[name]["first_step_s"] / r["eager"]["first_step_s"] for r in rounds])
        row["outcomes"] = [r.get("compile/background_outcome") or "compiled in the first step" for r in runs]
        row["beside_s"] = [r.get("compile/background_s") for r in runs]
        row["compile_s"] = [r.get("compile/time_s") for r in runs]
        row["train_loss"] = [r.get("train/loss") for r in runs]
        rows.append(row)
    return rows


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value)
    return "-" if value is None else str(value)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| contestant | wall [s] | vs eager | first step done [s] | vs eager | compile beside [s] | "
             "compile in run [s] | outcome per round |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {_fmt(r['wall_s'])} | {_fmt(r.get('wall_vs_eager'))}x | "
                     f"{_fmt(r['first_step_s'])} | {_fmt(r.get('first_vs_eager'))}x | {_fmt(r['beside_s'])} | "
                     f"{_fmt(r['compile_s'])} | {'; '.join(str(o) for o in r['outcomes'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=None, help="trainer.max_steps (the quickstart's 300 if unset)")
    p.add_argument("--skip", nargs="*", default=[], choices=list(CONTESTANTS), help="contestants left out")
    p.add_argument("--quick", action="store_true", help="the smoke recipe, 1 round (plumbing only)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args, rest = p.parse_known_args(argv)
    if args.child is not None:
        _child(args.child, [a for a in rest if a != "--"])
        return 0
    recipe = ["+recipe=smoke", "compile.backend=inductor"] if args.quick else ["+recipe=quickstart"]
    extra = [f"trainer.max_steps={args.steps}"] if args.steps else []
    names = [n for n in CONTESTANTS if n not in args.skip]
    rounds_n = 1 if args.quick else args.rounds
    root = Path(tempfile.mkdtemp(prefix="bench-background-"))
    rounds: list[dict[str, dict[str, Any]]] = []
    for r in range(rounds_n):
        order = names[r % len(names):] + names[:r % len(names)]  # rotated: each contestant goes first once
        results: dict[str, dict[str, Any]] = {}
        for name in order:
            results[name] = run_one(name, recipe, extra, root, r)
            print(f"round {r + 1}/{rounds_n} {name}: {results[name]['wall_s']:.1f} s, first step "
                  f"{results[name]['first_step_s']:.1f} s, load {results[name]['load_before']:.2f}->"
                  f"{results[name]['load_after']:.2f}, {results[name]['compile/background_outcome']}", flush=True)
        rounds.append(results)
    rows = summarize(rounds, names)
    loads = [x for rnd in rounds for res in rnd.values() for x in (res["load_before"], res["load_after"])]
    cpu = _cpu_model()
    print(f"\n{' '.join(recipe + extra)}, cold compile cache per process, {rounds_n} rounds, {os.cpu_count()} cores "
          f"({cpu}), load average {min(loads):.2f}-{max(loads):.2f} during the runs\n")
    print(table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": datetime.date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(),
                                    "recipe": recipe + extra, "rounds": rounds, "summary": rows,
                                    "load": [min(loads), max(loads)]}, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
