"""The recipe ``runner tune`` wrote, side by side with the recipe's default stack and eager Lightning fp32.

Each contestant runs as a user runs it (``python -m runner +recipe=...``), in its own process, one after
another, ``--rounds`` times in rotated order (a load burst on a shared machine hits every contestant),
with no eager/compiled pairs inside the runs (``telemetry.speedup_steps=0``): each run's steady time per
token is runner's ``perf/tokens_per_s`` (timed steps after the compile steps and two quiet ones).
Each process runs with ``TORCHINDUCTOR_COMPILE_THREADS=1`` (``--compile-threads``): on a 2-core CPU,
Inductor's compile-worker pool starting beside the run made ~15 s of steps 10-100x slower (a 5 ms
smoke step took 500-800 ms), which a short run's time per token cannot absorb.

    .venv/bin/python benchmarks/tune_winner.py --recipe quickstart --tuned quickstart_tuned
    .venv/bin/python benchmarks/tune_winner.py --recipe smoke --tuned smoke_tuned --steps 12   # seconds

Prints one row per contestant (median over rounds) and the winner's ratios over the default and eager.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def contestants(recipe: str, tuned: str) -> dict[str, list[str]]:
    """name -> overrides: eager Lightning fp32, the recipe as shipped, the tuned recipe."""
    return {
        "eager fp32": [f"+recipe={recipe}", "compile=eager", "trainer.precision=32-true", "offload=none"],
        "default": [f"+recipe={recipe}"],
        "tuned": [f"+recipe={tuned}"],
    }


def run_one(overrides: list[str], steps: int | None, run_dir: Path, extra: list[str],
            compile_threads: int) -> dict[str, Any]:
    """One run in its own process; its report's figures."""
    length = [f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps}"] if steps else []
    cmd = [sys.executable, "-m", "runner", *overrides, *length, "telemetry.speedup_steps=0",
           "trainer.enable_progress_bar=false", *extra, f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=Path.cwd(), capture_output=True, text=True,
                          env={**os.environ, "WANDB_MODE": "offline",
                               "TORCHINDUCTOR_COMPILE_THREADS": str(compile_threads)})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads((run_dir / "report.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="quickstart", help="the recipe that was tuned")
    parser.add_argument("--tuned", default=None, help="the recipe runner tune wrote (default: <recipe>_tuned)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: the recipe's own)")
    parser.add_argument("--rounds", type=int, default=1, help="runs per contestant, in rotated order")
    parser.add_argument("--compile-threads", type=int, default=1, help="Inductor compile workers per process")
    parser.add_argument("overrides", nargs="*", help="extra overrides for every run")
    args = parser.parse_args()
    runs = contestants(args.recipe, args.tuned or f"{args.recipe}_tuned")
    names = list(runs)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                figures = run_one(runs[name], args.steps, Path(tmp) / f"{r}-{name.replace(' ', '_')}", args.overrides,
                                  args.compile_threads)
                results[name].append(figures)
                print(f"round {r + 1} {name}: {1e6 / figures['perf/tokens_per_s']:.2f} us/token, "
                      f"val bits/byte {figures.get('val/bpb')}", flush=True)
    rows = {name: summarize(results[name]) for name in names}
    print("\n| contestant | us/token | tokens/s | val bits/byte | compile s | wall s |\n|---|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['us']:.2f} | {1e6 / row['us']:.0f} | {row['bpb']:.4f} | {row['compile_s']:.1f} | "
              f"{row['wall_s']:.1f} |")
    tuned, default, eager = rows["tuned"], rows["default"], rows["eager fp32"]
    print(f"\ntuned vs default: {default['us'] / tuned['us']:.3f}x; "
          f"tuned vs eager fp32: {eager['us'] / tuned['us']:.3f}x; "
          f"val bits/byte tuned - eager: {tuned['bpb'] - eager['bpb']:+.4f} ({args.rounds} round(s), "
          f"{args.steps or 'recipe'} steps)")


def summarize(figures: list[dict[str, Any]]) -> dict[str, float]:
    """Medians over rounds: time per token, val bits/byte, compile time, wall time."""
    def med(key: str) -> float:
        values = [f[key] for f in figures if isinstance(f.get(key), (int, float))]
        return statistics.median(values) if values else float("nan")

    return {"us": statistics.median(1e6 / f["perf/tokens_per_s"] for f in figures), "bpb": med("val/bpb"),
            "compile_s": med("compile/time_s"), "wall_s": med("run/wall_s")}


if __name__ == "__main__":
    main()
