"""runner against the tools its users would pick instead, interleaved in one process.

    .venv/bin/python benchmarks/compare.py            # full run: gpt, many_params, overhead; cold/warm compile
    .venv/bin/python benchmarks/compare.py --quick    # tiny sizes, seconds of steps (the test uses it)

Method: every contestant (``contestants/compare.py``) trains its own copy of the same model
(``contestants/workloads.py``, same seed) on the same batches (same DataLoader seed) with the same AdamW
hyper-parameters, in its own process (threads of one process slow each other's OpenMP kernels: see
``contestants/compare.py``), forked from a server that has imported torch and Lightning and run nothing
(``harness/fork_server.py``).
The driver first lets each contestant build and run its warm-up steps alone (the first step is
where compilation happens: compile time = first step - steady median), then runs ``--rounds``
rounds in which every contestant in turn runs ``--turn`` timed steps (order reversed on odd
rounds). Each contestant runs in ``--copies`` processes that take the rounds in turn, so one
process's luck (memory placement, cores) does not decide a ratio. A step is the time between two
consecutive step starts (the race: ``harness/race.py``). Reported: the median step per
contestant, and each ratio as the median over rounds of the per-round ratio of medians, which
cancels the machine's drift. Finally the cold/warm compile runs (``harness/compile_cache.py``).
Prints markdown tables and the targets (``reports/compare.py``); writes ``benchmarks/results/compare.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import sys
import tempfile
import warnings
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import lightning
import torch
from contestants.compare import bf16_contestants, contestants
from contestants.workloads import workloads
from harness import fork_server  # benchmarks/ on sys.path: run as a script
from harness.compile_cache import child, cold_warm
from harness.race import add_ratios, race
from reports.compare import report, targets

from runner.config.schema import Scope

MODELS = ("gpt", "many_params", "overhead", "gpt_bf16")
OUT = Path(__file__).resolve().parent / "results" / "compare.json"


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    if Path("/proc/cpuinfo").exists():
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "lightning": lightning.__version__, "python": platform.python_version(),
            "load_avg": os.getloadavg(), "date": datetime.datetime.now().isoformat(timespec="seconds")}


def bf16_support() -> tuple[bool, str]:
    """Whether the bf16-mixed race is worth running here, and why. On a CPU without bf16 matmul units
    (AVX-512-BF16 or AMX) torch emulates bf16 matmuls ~100x slower than fp32: the race would take hours
    and measure the emulation."""
    flags: set[str] = set()
    if Path("/proc/cpuinfo").exists():
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("flags"):
                flags = set(ln.split(":", 1)[1].split())
                break
    units = sorted(flags & {"avx512_bf16", "amx_bf16"})
    if units:
        return True, f"CPU bf16 units: {', '.join(units)}"
    return False, ("skipped by default: this CPU has no bf16 matmul units (no avx512_bf16/amx_bf16 flag), so "
                   "bf16 matmuls are emulated; run it with --models gpt_bf16")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny models and few steps (plumbing check)")
    p.add_argument("--models", nargs="+", default=None, choices=MODELS,
                   help="default: all; gpt_bf16 only where the CPU has bf16 matmul units (see bf16_support)")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--scopes", nargs="+", default=["step", "step_backward", "model", "blocks"])
    p.add_argument("--options", nargs="*", default=["cpp_wrapper"],
                   help="boolean Inductor options, each tried on runner's best scope as one more contestant")
    p.add_argument("--best", default="step", help="runner's configuration for this device (compile.scope; "
                   "step: forward+loss compiled, AOT-compiled backward, fused AdamW measured fastest here)")
    p.add_argument("--no-fused-peer", action="store_true", help="skip Lightning + compile + fused AdamW")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--turn", type=int, default=None, help="timed steps per contestant per round")
    p.add_argument("--copies", type=int, default=None,
                   help="processes per contestant, taking the rounds in turn (default: 2, 1 with --quick)")
    p.add_argument("--no-cache-runs", action="store_true", help="skip the cold/warm compile processes")
    p.add_argument("--cache-model", default="gpt", choices=["gpt", "many_params"])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--render", type=Path, help="print the tables of a saved JSON result instead of running")
    # internal: one cold/warm compile process
    p.add_argument("--cache-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--save-artifacts", help=argparse.SUPPRESS)
    p.add_argument("--load-artifacts", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.models is None:
        a.models = [m for m in MODELS if m != "gpt_bf16" or bf16_support()[0]]
    a.warmup = a.warmup or (2 if a.quick else 3)
    a.rounds = a.rounds or (2 if a.quick else 16)
    a.turn = a.turn or (2 if a.quick else 6)
    a.copies = a.copies or (1 if a.quick else 2)
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    if a.render:
        result = json.loads(a.render.read_text())
        for m in result["models"].values():
            add_ratios(m["contestants"])
        result["targets"] = targets(result, f"runner_{a.best}")
        print(report(result, f"runner_{a.best}"))
        return
    if a.cache_child:
        work = workloads([a.cache_model], a.quick)[0]
        steps = a.warmup + 4
        print(json.dumps(child(work, Scope(a.best), a.backend, steps, a.save_artifacts, a.load_artifacts)))
        return
    ctx = fork_server.start()
    with tempfile.TemporaryDirectory(prefix="runner-bench-") as scratch:
        # Every temporary file of the run (Inductor caches, contestants' CSV logs, the cold/warm child
        # processes' files, which inherit TMPDIR) lands here and is removed at the end.
        os.environ["TMPDIR"] = tempfile.tempdir = scratch
        try:
            run(a, ctx)
        finally:
            tempfile.tempdir = None
            os.environ.pop("TMPDIR", None)


def run(a: argparse.Namespace, ctx: BaseContext) -> None:
    """The race on each model, then the cold/warm compile runs; prints and writes the result."""
    # A fresh Inductor cache: compile times in the race are cold, except for graphs an earlier
    # contestant of this run already compiled (those hit the FX-graph cache).
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    scopes = [Scope(s) for s in a.scopes]
    result: dict[str, Any] = {"machine": machine(), "method": __doc__, "args": {k: str(v) for k, v in vars(a).items()},
                              "models": {}, "bf16": bf16_support()[1]}
    best = f"runner_{a.best}"
    for work in workloads(a.models, a.quick):
        if work.name == "gpt_bf16":
            field = bf16_contestants(a.backend, Scope(a.best))
        else:
            field = contestants(a.backend, scopes, Scope(a.best), fused_peer=not a.no_fused_peer,
                                options=tuple(a.options) if a.backend == "inductor" else ())
        figs = race(ctx, work.name, a.quick, field, a.warmup, a.rounds, a.turn * work.turn_scale, a.copies)
        result["models"][work.name] = {"describe": work.describe, "turn": a.turn * work.turn_scale,
                                       "contestants": figs}
        print(f"{work.name}: done", file=sys.stderr, flush=True)
    if not a.no_cache_runs:
        argv_child = ["--cache-model", a.cache_model, "--best", a.best, "--backend", a.backend,
                      *(["--quick"] if a.quick else [])]
        result["compile_cache"] = {"model": a.cache_model, "contestant": best, **cold_warm(argv_child)}
    result["targets"] = targets(result, best)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(report(result, best) + f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
