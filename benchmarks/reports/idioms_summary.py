"""The idiom benchmark's row for one idiom (``benchmarks/idioms.py``), from what its two processes sent: the step
times of eager Lightning and runner over the rounds both completed and their ratio, the parity of every logged
value, loss and final parameter, and runner's compile figures; or, for a runner fit that raised, its error and
what it had compiled by then."""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

from tests.zoo.registry import IDIOMS


def failed(name: str, traceback: str, figures: dict[str, Any] | None) -> dict[str, Any]:
    """The row of an idiom whose runner fit raised: the exception's last line, the traceback, and the
    figures collected up to the error (frames, graphs, the guards that hit the recompile limit)."""
    last = [line for line in traceback.strip().splitlines() if line and not line.startswith(" ")][-1]
    row = {"idiom": name, "runner_does": IDIOMS[name].runner_does, "dropout": IDIOMS[name].dropout,
           "error": last[:300], "traceback": traceback}
    if figures:
        row |= {"frames": figures.get("compile/frames", 0), "graphs": figures["compile/graphs"],
                "graph_breaks": figures["compile/graph_breaks"],
                "limit_hit_guards": [h.get("guard", str(h)) for h in figures["compile/recompile_limit_hits"]],
                "demoted": [str(d) for d in figures.get("compile/demoted", [])]}
    return row


def summarize(name: str, results: dict[str, Any], warmup: int, rounds: int, turn: int) -> dict[str, Any]:
    eager, runner = results["eager"]["trace"], results["runner"]["trace"]
    figures = results["runner"]["figures"]
    # An idiom that stops itself (trainer.should_stop) is timed over the turns both processes completed.
    rounds = min(rounds, *((len(t.step_s) - warmup) // turn for t in (eager, runner)))
    rows: dict[str, Any] = {}
    for key, trace in (("eager", eager), ("runner", runner)):
        if rounds < 1:
            rows[key] = {"median_ms": math.nan, "p25_ms": math.nan, "p75_ms": math.nan, "round_medians_ms": []}
            continue
        steady = trace.step_s[warmup:warmup + rounds * turn]
        per_round = [statistics.median(steady[i * turn:(i + 1) * turn]) for i in range(rounds)]
        q = statistics.quantiles(steady, n=4)
        rows[key] = {"median_ms": 1e3 * statistics.median(steady), "p25_ms": 1e3 * q[0], "p75_ms": 1e3 * q[2],
                     "round_medians_ms": [1e3 * m for m in per_round]}
    ratio = statistics.median(r / e for r, e in zip(rows["runner"]["round_medians_ms"],
                                                     rows["eager"]["round_medians_ms"], strict=True)) \
        if rounds >= 1 else math.nan
    worst, worst_key = _worst(eager.steps + eager.epochs, runner.steps + runner.epochs, lambda k: True)
    worst_loss, worst_loss_key = _worst(eager.steps, runner.steps, lambda k: "loss" in k)
    floats = [k for k, v in eager.state.items() if v.is_floating_point()]
    e_vec = torch.cat([eager.state[k].double().flatten() for k in floats])
    c_vec = torch.cat([runner.state[k].double().flatten() for k in floats])
    late = [r for r in figures["compile/recompile_reasons"] if (r["step"] or 0) >= 1]
    return {
        "idiom": name, "runner_does": IDIOMS[name].runner_does, "dropout": IDIOMS[name].dropout,
        "steps": len(eager.steps), "steps_runner": len(runner.steps), "timed_rounds": rounds,
        "eager": rows["eager"], "runner": rows["runner"], "vs_eager": ratio,
        "loss_rel_diff": worst_loss, "loss_rel_diff_key": worst_loss_key,
        "max_rel_diff": worst, "max_rel_diff_key": worst_key,
        "frames": figures.get("compile/frames", 0),
        "demoted": [str(d) for d in figures.get("compile/demoted", [])],
        "params_rel_diff": float((c_vec - e_vec).norm() / e_vec.norm()),
        "graphs": figures["compile/graphs"], "graph_breaks": figures["compile/graph_breaks"],
        "recompiles": figures["compile/recompiles"], "recompiles_after_first_step": len(late),
        "limit_hits": len(figures["compile/recompile_limit_hits"]), "compile_s": figures["compile/time_s"],
        "modules_compiled": figures["compile/modules_compiled"], "optimizer": figures["compile/optimizer"],
        "recompile_reasons": [f"step {r['step']}: {r['reason'].splitlines()[0][:160]}"
                              for r in figures["compile/recompile_reasons"]],
        "graph_break_reasons": [f"{b['reason']} at {b['user_frame']}" for b in figures["compile/graph_break_reasons"]],
    }


def _worst(eager: list[dict[str, float]], runner: list[dict[str, float]], keep: Any) -> tuple[float, str]:
    """The largest relative difference to eager's over the ``keep``-selected keys, and its key (a value
    runner did not log, or a step it did not run, counts as NaN: the worst)."""
    worst, worst_key = 0.0, "-"
    for i, e in enumerate(eager):
        c = runner[i] if i < len(runner) else {}
        for k, v in e.items():
            if keep(k):
                diff = abs(c.get(k, math.nan) - v) / max(abs(v), 1e-8)
                if not diff <= worst:
                    worst, worst_key = diff, k
    return worst, worst_key
