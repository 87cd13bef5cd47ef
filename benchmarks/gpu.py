"""runner against Lightning on one GPU: step time, throughput, MFU, compile time, memory, CUDA graphs.

    python benchmarks/gpu.py                  # on a GPU: gpt_124m and gpt_small, up to 3 rounds, under 8 min
    python benchmarks/gpu.py --quick          # on the CPU: one tiny GPT, Dynamo backend aot_eager, 1 round

Method: every (model, contestant) pair trains in a process of its own, once per round; rounds
interleave the contestants (the order rotated by one each round) so a drift of the machine hits all
alike, and every ratio is the median over rounds of the same round's step times. All contestants run
one code path (``gpu_contestant.py``: same GPT from the same seed, same loss, same AdamW hyper-parameters, no
LR schedule, no gradient clipping, a pinned-memory DataLoader over the same synthetic tokens, no
progress bar, logger or checkpoint); they differ only in the strategy and the compile call. A callback
synchronises the device only at the two ends of the timed window (after the warm-up steps, which hold
every compile and CUDA-graph recording), so the measurement adds no per-step sync. The device's matmul
peak (bf16 on a GPU, for MFU) is probed once per run in a process of its own. Writes
``benchmarks/results/gpu.json`` (``--quick``: a file in the temporary directory unless ``--out`` is given).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

CONTESTANT = Path(__file__).resolve().parent / "gpu_contestant.py"
OUT = Path(__file__).resolve().parent / "results" / "gpu.json"
QUICK_OUT = Path(tempfile.gettempdir()) / "runner-gpu-quick.json"
PEERS = ("lightning_compile_fused", "lightning")
ROW_KEYS = ("step_ms", "tokens_per_s", "mfu", "compile_s", "peak_mem_gib", "cudagraph_recordings_after_warmup",
            "ratio_vs_lightning_compile_fused", "ratio_vs_lightning", "compiles_after_warmup", "compile_warm_s",
            "cudagraph_partitions", "cudagraph_partitions_graphed", "cudagraph_eager_reasons")
"""Every row's figures besides model and contestant (null where they do not apply, or when it failed)."""
CONTESTANTS = {
    "lightning": "Lightning, eager",
    "lightning_compile_fused": "Lightning + torch.compile(model) in the module + fused AdamW",
    "lightning_compile_reduce_overhead": "the same with torch.compile(model, mode='reduce-overhead')",
    "runner_step": "runner's defaults: CompileStrategy()",
    "runner_cudagraphs": "CompileStrategy(cudagraphs=reduce_overhead)",
    "runner_best": "what runner picks for speed on this device (runner_best_settings)",
}


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
        return f"GPT {self.n_layer}x{self.n_embd}, {self.n_head} heads, seq {self.seq}, batch {self.batch}, vocab 256"


# Warm-up 10: runner's 3 eager CUDA-graph steps, then Inductor's warm-up call and recording, with room to spare.
MODELS = {"gpt_124m": Model(12, 768, 12, 1024, 16, 10, 30), "gpt_small": Model(4, 128, 4, 256, 16, 10, 100)}
QUICK = Model(2, 32, 2, 32, 4, 2, 4)


def spawn(args: list[str], scratch: Path, timeout: float) -> dict[str, Any]:
    """Run ``gpu_contestant.py`` with ``args`` in a fresh interpreter; its result, or ``{"error": ...}``."""
    result = scratch / f"result-{time.monotonic_ns()}.json"
    try:
        proc = subprocess.run([sys.executable, str(CONTESTANT), *args, str(result)], capture_output=True,
                              text=True, timeout=timeout, check=False, cwd=scratch)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout:g} s"}
    if proc.returncode != 0 or not result.exists():
        return {"error": f"exit {proc.returncode}: {proc.stderr[-3000:]}"}
    return json.loads(result.read_text())


def summarize(model: str, runs: dict[str, list[dict[str, Any]]], peak: float | None) -> list[dict[str, Any]]:
    """One row per contestant: median step over rounds; each ratio the median over rounds of the same
    round's ratio; compile_s from the contestant's first round (cold, but for graphs another contestant
    of the run compiled first), compile_warm_s the median of the later rounds' (cache hits)."""
    rows = []
    for name, rounds in runs.items():
        row: dict[str, Any] = {"model": model, "contestant": name, "label": CONTESTANTS[name]}
        failed = [r["error"] for r in rounds if "error" in r]
        if failed:
            rows.append({**row, **dict.fromkeys(ROW_KEYS), "error": failed[0]})
            continue
        step_s = statistics.median(r["step_ms"] for r in rounds) / 1e3
        first = rounds[0]
        row |= {"step_ms": 1e3 * step_s, "tokens_per_s": first["tokens_per_step"] / step_s,
                "mfu": first["flops_per_step"] / step_s / (peak * 1e12) if peak else None,
                "compile_s": first["compile_s"]}
        for p in PEERS:
            ok = all("error" not in r for r in runs[p])
            row[f"ratio_vs_{p}"] = statistics.median(
                a["step_ms"] / b["step_ms"] for a, b in zip(rounds, runs[p], strict=True)) if ok else None
        for key in ("peak_mem_gib", "cudagraph_recordings_after_warmup", "compiles_after_warmup"):
            row[key] = None if first[key] is None else max(r[key] for r in rounds)  # the worst round's
        # Partitions are seen where a graph is compiled, not loaded from the run's shared cache: the first round.
        counted = next((r for r in rounds if r.get("cudagraph_partitions") is not None), {})
        for key in ("cudagraph_partitions", "cudagraph_partitions_graphed", "cudagraph_eager_reasons"):
            row[key] = counted.get(key)
        row |= {"round_step_ms": [r["step_ms"] for r in rounds],
                "compile_warm_s": statistics.median(r["compile_s"] for r in rounds[1:]) if rounds[1:] else None}
        rows.append(row)
    return rows


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _partitions_cell(row: dict[str, Any]) -> str:
    """``N of M`` partitions CUDA-graphed, with the first reason the rest are not."""
    if row.get("cudagraph_partitions") is None:
        return "-"
    text = f"{row['cudagraph_partitions_graphed']} of {row['cudagraph_partitions']}"
    reasons = row.get("cudagraph_eager_reasons") or []
    return text + (f" ({reasons[0]['nodes']} nodes: {reasons[0]['reason']})" if reasons else "")


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of one model's rows."""
    head = ["contestant", "step ms", "tokens/s", "MFU", "compile s", "peak GiB", "CUDA graphs recorded after warm-up",
            "partitions in CUDA graphs", *(f"vs {p}" for p in PEERS)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        if r["step_ms"] is None:
            lines.append(f"| {r['contestant']} | failed: {r['error'].strip().splitlines()[-1][:100]} |")
            continue
        cells = [r["contestant"], _cell(r["step_ms"], ".2f"), _cell(r["tokens_per_s"], ",.0f"), _cell(r["mfu"], ".1%"),
                 _cell(r["compile_s"], ".1f"), _cell(r["peak_mem_gib"], ".2f"),
                 _cell(r["cudagraph_recordings_after_warmup"], "d"), _partitions_cell(r),
                 *(_cell(r[f"ratio_vs_{p}"], ".3f") for p in PEERS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(a: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """The peak probe, then the rounds (each started only while it should end within ``--budget-s``)."""
    t0 = time.monotonic()
    device = "cpu" if a.quick else "cuda"
    peak = {"tflops": a.peak_tflops, "source": "given"} if a.peak_tflops else \
        spawn(["--peak", device], scratch, 300)
    models = {name: QUICK if a.quick else MODELS[name] for name in a.models}
    names = a.contestants
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {n: [] for n in names} for m in models}
    rounds, last = 0, 0.0
    while rounds < a.rounds and (not rounds or time.monotonic() - t0 + last <= a.budget_s):
        started = time.monotonic()
        for model, size in models.items():
            for name in names[rounds % len(names):] + names[:rounds % len(names)]:  # each goes first in turn
                out = spawn([name, json.dumps(asdict(size)), device, a.backend], scratch, 120 if a.quick else 400)
                runs[model][name].append(out)
                took = f"{out['step_ms']:.2f} ms" if "error" not in out else "FAILED"
                print(f"round {rounds + 1} {model} {name}: {took} ({time.monotonic() - t0:.0f} s)", flush=True)
        rounds, last = rounds + 1, time.monotonic() - started
    if rounds < a.rounds:
        print(f"stopped after {rounds} round(s): another would end past --budget-s {a.budget_s:g}", flush=True)
    done = [o for m in runs.values() for v in m.values() for o in v if "error" not in o]
    hydra = sorted({mod for o in done for mod in o["hydra_modules"]})
    return {"device": done[0]["device"] if done else device, "torch": version("torch"),
            "lightning": version("lightning"), "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": shlex.join(["python", *sys.argv]), "backend": a.backend, "rounds": rounds,
            "models": {m: f"{s.describe()}, {s.warmup} warm-up + {s.timed} timed steps" for m, s in models.items()},
            "peak": peak, "wall_s": time.monotonic() - t0, "hydra_free": not hydra if done else None,
            "hydra_modules": hydra,
            "rows": [row for m in models for row in summarize(m, runs[m], peak.get("tflops"))]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="every contestant on the CPU at tiny sizes (plumbing)")
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=None,
                   help="default: all (--quick: gpt_small; every model has the same tiny size there)")
    p.add_argument("--contestants", nargs="+", choices=list(CONTESTANTS), default=None,
                   help="default: all (a short GPU session may race fewer)")
    p.add_argument("--rounds", type=int, default=None, help="default 3 (GPU) or 1 (--quick)")
    p.add_argument("--budget-s", type=float, default=420.0, help="start no round that would end past this")
    p.add_argument("--backend", default=None, help="torch.compile backend (default inductor; aot_eager with --quick)")
    p.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU instead of the probe")
    p.add_argument("--out", type=Path, default=None, help=f"default {OUT} ({QUICK_OUT} with --quick)")
    a = p.parse_args(argv)
    a.models = a.models or (["gpt_small"] if a.quick else list(MODELS))
    a.contestants = a.contestants or list(CONTESTANTS)
    for peer in PEERS:  # every row's ratios are against these two, so they always run
        if peer not in a.contestants:
            a.contestants.append(peer)
    a.rounds = a.rounds or (1 if a.quick else 3)
    a.backend = a.backend or ("aot_eager" if a.quick else "inductor")
    a.out = a.out or (QUICK_OUT if a.quick else OUT)
    with tempfile.TemporaryDirectory(prefix="runner-gpu-bench-") as scratch:
        # One Inductor/Triton cache per run, shared by its processes: later rounds reuse the graphs the
        # first compiled, which keeps a run under 8 minutes (compile_s is each contestant's first round).
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(scratch) / "inductor")
        os.environ["TRITON_CACHE_DIR"] = str(Path(scratch) / "triton")
        if a.quick:  # plumbing only: one OpenMP thread each, so neighbours' load cannot stall spin-waits
            os.environ["OMP_NUM_THREADS"] = "1"
        result = run(a, Path(scratch))
    for model, describe in result["models"].items():
        print(f"\n## {model}: {describe}\n\n{table([r for r in result['rows'] if r['model'] == model])}")
    if "error" in result["peak"]:
        print(f"\nWARNING: the peak probe failed, so MFU is null: {result['peak']['error'].strip().splitlines()[-1]}")
    if result["hydra_free"] is False:
        print("\nWARNING: the contestants' processes imported hydra/omegaconf (see docs/benchmarks.md)")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{result['device']}, torch {result['torch']}, {result['rounds']} round(s) in {result['wall_s']:.0f} s; "
          f"wrote {a.out}")
    return 1 if any(r["step_ms"] is None for r in result["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
