"""The GPT workloads of ``gpu.py`` (``gpt_124m``, ``gpt_small``): step time against Lightning, in rounds.

Every (model, contestant) pair trains once per round; rounds interleave the contestants (the order rotated
by one each round) so a drift of the machine hits all alike, and every ratio is the median over rounds of
the same round's step times. The run shares one Inductor/Triton cache among its processes: ``compile_s`` is
each contestant's first round, ``compile_warm_s`` the later rounds' (cache hits). The device's matmul peak
(bf16 on a GPU, for MFU) is probed once per run in a process of its own.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from gpu_workloads.common import Column, Context, Row, RunFile, Workload, fmt, run_jobs
from gpu_workloads.results import contestant_order

PEERS = ("lightning_compile_fused", "lightning")
CONTESTANTS = {
    "lightning": "Lightning, eager",
    "lightning_compile_fused": "Lightning + torch.compile(model) in the module + fused AdamW",
    "lightning_compile_reduce_overhead": "the same with torch.compile(model, mode='reduce-overhead')",
    "runner_step": "runner's defaults: CompileStrategy() (cudagraphs=auto decides; compile.optimizer=auto)",
    "runner_cudagraphs_disabled": "CompileStrategy(cudagraphs=disabled)",
    "runner_cudagraphs": "CompileStrategy(cudagraphs=reduce_overhead): the CUDA graphs auto turns on where eligible",
    "runner_graphed": "CompileStrategy(cudagraphs=reduce_overhead, compile.optimizer=graphed): the graph-safe step",
    "runner_best": "what runner picks for speed on this device (runner_best_settings)",
}
"""Every runner contestant compiles in the run (``compile.background=disabled``): the timed steps are compiled
ones. ``runner_step`` against ``runner_cudagraphs_disabled`` and ``runner_cudagraphs``, and ``runner_graphed``
against ``runner_cudagraphs``, are the rows that decide ``runner.config.decisions.gpu_defaults`` (docs/gpu.md)."""


@dataclass(frozen=True)
class Model:
    """A byte-level GPT's size, its batches, and its (warm-up, timed) steps."""

    n_layer: int
    n_embd: int
    n_head: int
    seq: int
    batch: int
    warmup: int
    timed: int

    def describe(self) -> str:
        return (f"GPT {self.n_layer}x{self.n_embd}, {self.n_head} heads, seq {self.seq}, batch {self.batch}, "
                f"vocab 256, {self.warmup} warm-up + {self.timed} timed steps")


# Warm-up 10: runner's 3 eager CUDA-graph steps, then Inductor's warm-up call and recording, with room to spare.
MODELS = {"gpt_124m": Model(12, 768, 12, 1024, 16, 10, 30), "gpt_small": Model(4, 128, 4, 256, 16, 10, 100)}
QUICK = Model(2, 32, 2, 32, 4, 2, 4)


def summarize(runs: dict[str, list[Row]], peak: float | None) -> list[Row]:
    """One row per contestant that ran: median step over its rounds; each ratio the median over the rounds
    both it and the peer measured of the same round's ratio; compile_s from the contestant's first round
    (cold, but for graphs another contestant of the run compiled first), compile_warm_s the median of the
    later rounds' (cache hits). A contestant that failed every round gets a row with its ``error``."""
    rows = []
    for name, rounds in runs.items():
        if not rounds:
            continue
        row: Row = {"contestant": name, "label": CONTESTANTS[name]}
        ok = [r for r in rounds if "error" not in r]
        if not ok:
            rows.append({**row, "error": rounds[0]["error"]})
            continue
        step_s = statistics.median(r["step_ms"] for r in ok) / 1e3
        first = ok[0]
        row |= {"step_ms": 1e3 * step_s, "tokens_per_s": first["tokens_per_step"] / step_s,
                "mfu": first["flops_per_step"] / step_s / (peak * 1e12) if peak else None,
                "compile_s": first["compile_s"]}
        for p in PEERS:
            both = zip(rounds, runs.get(p, []), strict=False)  # a run cut short: the rounds both measured
            pairs = [(a, b) for a, b in both if "error" not in a and "error" not in b]
            row[f"ratio_vs_{p}"] = statistics.median(a["step_ms"] / b["step_ms"] for a, b in pairs) if pairs else None
        for key in ("peak_mem_gib", "cudagraph_recordings_after_warmup", "compiles_after_warmup"):
            row[key] = None if first[key] is None else max(r[key] for r in ok)  # the worst round's
        for key in ("host_ms_per_step", "device_busy"):  # CUDA only: null elsewhere (and in rows of before 2026-12)
            values = [r[key] for r in ok if r.get(key) is not None]
            row[key] = statistics.median(values) if values else None
        for key in ("cudagraphs_decision", "optimizer", "optimizer_recordings"):
            row[key] = first.get(key)
        # Partitions are seen where a graph is compiled, not loaded from the run's shared cache: the first round.
        counted = next((r for r in ok if r.get("cudagraph_partitions") is not None), {})
        for key in ("cudagraph_partitions", "cudagraph_partitions_graphed", "cudagraph_eager_reasons"):
            row[key] = counted.get(key)
        row |= {"round_step_ms": [r["step_ms"] for r in ok], "rounds_measured": len(ok),
                "compile_warm_s": statistics.median(r["compile_s"] for r in ok[1:]) if ok[1:] else None}
        if len(ok) < len(rounds):
            row["round_errors"] = [r["error"][-300:] for r in rounds if "error" in r]
        rows.append(row)
    return rows


def _partitions_cell(row: Row, rows: list[Row]) -> str:
    """``N of M`` partitions CUDA-graphed, with the first reason the rest are not."""
    if row.get("cudagraph_partitions") is None:
        return "-"
    text = f"{row['cudagraph_partitions_graphed']} of {row['cudagraph_partitions']}"
    reasons = row.get("cudagraph_eager_reasons") or []
    return text + (f" ({reasons[0]['nodes']} nodes: {reasons[0]['reason']})" if reasons else "")


def _decision_cell(row: Row, rows: list[Row]) -> str:
    """``cudagraphs/decision`` up to its parenthesis (the conditions it checked), ``|`` kept out of the table."""
    decision = row.get("cudagraphs_decision")
    return "-" if not decision else decision.split(" (")[0].replace("|", "/")


COLUMNS: list[Column] = [
    ("step ms", fmt("step_ms", ".2f")), ("tokens/s", fmt("tokens_per_s", ",.0f")), ("MFU", fmt("mfu", ".1%")),
    ("compile s", fmt("compile_s", ".1f")), ("peak GiB", fmt("peak_mem_gib", ".2f")),
    ("cudagraphs/decision", _decision_cell),
    ("CUDA graphs recorded after warm-up", fmt("cudagraph_recordings_after_warmup", "d")),
    ("partitions in CUDA graphs", _partitions_cell),
    ("optimizer step", lambda r, rows: str(r.get("optimizer") or "-")),
    ("host ms/step", fmt("host_ms_per_step", ".2f")), ("device busy", fmt("device_busy", ".0%")),
    *((f"vs {p}", fmt(f"ratio_vs_{p}", ".3f")) for p in PEERS),
    ("rounds", lambda r, rows: str(r.get("rounds_measured") or r.get("rounds") or "-")),
]


def same_rounds(rows: list[Row], mine: str, theirs: str) -> float | None:
    """``mine``'s step time over ``theirs``', the median over the rounds both measured (same device); < 1 is faster."""
    a = next((r for r in rows if r["contestant"] == mine and r.get("round_step_ms")), None)
    b = next((r for r in rows if r["contestant"] == theirs and r.get("round_step_ms")
              and a is not None and r.get("device") == a.get("device")), None)
    if a is None or b is None:
        return None
    return statistics.median(x / y for x, y in zip(a["round_step_ms"], b["round_step_ms"], strict=False))


# The rows that decide runner.config.decisions.gpu_defaults (docs/gpu.md, "Defaults follow the rows"): (default,
# contestant, its peer, what the contestant's step time over its peer's says for the default: above 1.00, at most 1.00).
RULES = (("CUDAGRAPHS_AUTO", "runner_cudagraphs", "runner_cudagraphs_disabled",
          "CUDA graphs slower: turn it False", "it stays True"),
         ("CUDAGRAPHS_AUTO", "runner_step", "runner_cudagraphs_disabled",
          "auto slower than disabled: turn it False", "it stays True"),
         ("OPTIMIZER_AUTO_GRAPHED", "runner_graphed", "runner_cudagraphs",
          "the graphed step slower: it stays False", "turn it True if the other GPT workload agrees"))


def targets_of(workload: str) -> Any:
    """The issue's targets for ``workload``'s rows, and what the rows say of each default they decide."""
    def targets(rows: list[Row]) -> list[str]:
        out = []
        for row in rows:
            value = row.get("ratio_vs_lightning_compile_fused")
            if row["contestant"] in ("runner_step", "runner_best") and value is not None:
                n = row.get("rounds_measured") or row.get("rounds")
                out.append(f"{row['contestant']} / lightning_compile_fused step time: {value:.3f} "
                           f"(median of {n} same-round ratio{'s' if n != 1 else ''}; < 1 is faster)")
        peer, want = {"gpt_small": ("lightning_compile_reduce_overhead", 1.5),
                      "gpt_124m": ("lightning_compile_fused", 1.05)}[workload]
        if (x := same_rounds(rows, peer, "runner_step")) is not None:
            out.append(f"runner's defaults {x:.2f}x as fast as {peer} (target >= {want}x: "
                       f"{'met' if x >= want else 'missed'})")
        busy = next((r.get("device_busy") for r in rows if r["contestant"] == "runner_step"), None)
        if workload == "gpt_small" and busy is not None:
            out.append(f"runner's defaults keep the device busy {busy:.0%} of the time (target >= 85%: "
                       f"{'met' if busy >= 0.85 else 'missed'})")
        on_cpu = any(str(r.get("device") or "").startswith("cpu") for r in rows)
        for default, mine, theirs, above, below in () if on_cpu else RULES:  # CUDA graphs exist on a GPU only
            if (r := same_rounds(rows, mine, theirs)) is not None:
                says = above if r > 1.0 else below
                out.append(f"gpu_defaults.{default}: {mine} / {theirs} step time {r:.3f} ({says})")
        return out

    return targets


def gpt_runner(name: str) -> Any:
    """The run of GPT workload ``name``: ``rounds`` rounds, each started only while it should end before
    the deadline (as long as the last round took), the rows rewritten after every contestant. The peak
    probe is the first job of the first round (its own process on a GPU) unless the run already has it."""
    def run(ctx: Context, out: RunFile, rounds: int) -> None:
        size = QUICK if ctx.quick else MODELS[name]
        picked = ctx.pick(list(CONTESTANTS), PEERS)  # every ratio needs the peers
        # The peers first, then never measured (a round cut short keeps them), then oldest; rotated each round.
        names = contestant_order(ctx.shared.get("results") or {"rows": []}, name, picked, PEERS)
        runs: dict[str, list[Row]] = {n: [] for n in CONTESTANTS if n in names}  # rows in the table's order
        done: list[Row] = []
        now: dict[str, Any] = {"round": 0, "jobs": []}

        def on_result(i: int, result: Row) -> None:
            who = now["jobs"][i][0]
            if who == "peak":
                ctx.shared["peak"] = result
                return
            runs[who].append(result)
            done.append(result)
            took = f"{result['step_ms']:.2f} ms" if "error" not in result else "FAILED"
            print(f"{name} round {now['round'] + 1} {who}: {took}", flush=True)
            out.data["rounds"] = out.data["units"] = now["round"] + 1
            out.update(summarize(runs, ctx.shared.get("peak", {}).get("tflops")), done, peak=ctx.shared.get("peak"))

        last = 0.0
        while now["round"] < rounds and (now["round"] == 0 or ctx.left() > last):
            started, r = time.monotonic(), now["round"]
            order = names[r % len(names):] + names[:r % len(names)]  # each goes first in turn
            now["jobs"] = [("peak", {"call": "gpu_workloads.contestant:peak", "args": {"device": ctx.device}})] \
                if "peak" not in ctx.shared else []
            now["jobs"] += [(n, {"call": "gpu_workloads.contestant:train_job", "args": {
                "name": n, "size": asdict(size), "device": ctx.device, "backend": ctx.backend}}) for n in order]
            run_jobs([job for _, job in now["jobs"]], ctx, 120 if ctx.quick else 400, on_result=on_result)
            now["round"], last = r + 1, time.monotonic() - started
        # The GPU machine had no Hydra: what the contestants import is recorded (they need none of it).
        hydra = sorted({m for r in done for m in r.get("hydra_modules", [])})
        out.update(summarize(runs, ctx.shared.get("peak", {}).get("tflops")), done,
                   complete=now["round"] == rounds and len(names) == len(CONTESTANTS), peak=ctx.shared.get("peak"),
                   hydra_modules=hydra)
        if now["round"] < rounds:
            print(f"{name}: stopped after {now['round']} round(s): another would end past the budget", flush=True)

    return run


def _workload(name: str, round_s: float) -> Workload:
    return Workload(name, lambda quick: (QUICK if quick else MODELS[name]).describe(), CONTESTANTS, round_s,
                    gpt_runner(name), COLUMNS, targets_of(name), max_rounds=3, first=PEERS)


# Per round on a GPU: gpt_124m took 230 s for one round on an H200 (six contestants, cold compiles).
GPT_124M = _workload("gpt_124m", 240.0)
GPT_SMALL = _workload("gpt_small", 150.0)
