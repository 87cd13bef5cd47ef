"""runner against Lightning on one GPU: the workloads users run, in order of need, within a time budget.

    python benchmarks/gpu.py --budget-s 480              # on a GPU: what is most needed and fits in 8 minutes
    python benchmarks/gpu.py --quick                     # on the CPU: every workload at tiny sizes (plumbing)
    python benchmarks/gpu.py --merge gpu-out/rows/*.json # fold a run's rows into results/gpu.json, rewrite docs/gpu.md
    python benchmarks/gpu.py --docs [--check]            # rewrite (check) docs/gpu.md's tables from results/gpu.json

Workloads (the table ``WORKLOADS``): ``gpt_124m`` and ``gpt_small`` (step time, in rounds: ``gpu_workloads/gpt.py``),
``hf_varlen`` (a BERT-shaped classifier fine-tuned on variable-length batches: time to finish, ``gpu_workloads/hf.py``),
``memory`` (saved-activation strategies on a Llama-style LM: the largest batch under a memory cap) and
``cold_start`` (seconds to the first trained steps, cold and from a warm cache): ``gpu_workloads/specs.py``;
``packing``, ``lora`` and ``vocab`` (a 128,256-id vocabulary: the chunked loss's peak memory and step time,
``gpu_workloads/vocab.py``).
Their order is need: a workload with a contestant never measured first, then the one measured longest ago
(``benchmarks/results/gpu.json``'s rows; with ``--quick``, the order given); within a workload its reference
peers (eager Lightning for ``hf_varlen``, the two Lightning peers of the GPT workloads) come first and are always
raced, then contestants never measured. Each takes its
expected cost (its last GPU run's time per round or per contestant, else an
estimate); one that does not fit what is left of ``--budget-s`` is skipped, or runs as many contestants as
fit; what is left after every workload that fits goes to more rounds of the GPT workloads (up to 3, each
ratio then the median over rounds). Each workload's rows go to ``--out-dir/WORKLOAD.json`` as every
contestant finishes, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_workloads.common import Context, RunFile, Workload
from gpu_workloads.docs import render, table
from gpu_workloads.dpo import DPO_WORKLOAD
from gpu_workloads.gpt import GPT_124M, GPT_SMALL
from gpu_workloads.hf import HF_VARLEN
from gpu_workloads.lora import LORA_WORKLOAD
from gpu_workloads.packing import PACKING
from gpu_workloads.results import RESULTS, load, merge, need_order, plan, unit_cost, write_json
from gpu_workloads.specs import COLD_START, MEMORY
from gpu_workloads.vocab import VOCAB_WORKLOAD

# Every workload, in the docs' order: a new one is a module defining its ``Workload`` and one entry here.
WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    GPT_124M,
    GPT_SMALL,
    HF_VARLEN,
    MEMORY,
    COLD_START,
    PACKING,
    LORA_WORKLOAD,
    DPO_WORKLOAD,
    VOCAB_WORKLOAD,
)}
DOCS = Path(__file__).resolve().parents[1] / "docs" / "gpu.md"
QUICK_OUT = Path(tempfile.gettempdir()) / "runner-gpu-quick"


def order_key(workload: str, contestant: str) -> tuple[int, int]:
    """Rows sort by workload, then by the workload's contestants' order."""
    names = list(WORKLOADS)
    w = WORKLOADS.get(workload)
    listed = list(w.contestants) if w else []
    return (names.index(workload) if workload in names else len(names),
            listed.index(contestant) if contestant in listed else len(listed))


def queue(names: list[str], results: dict[str, Any], budget_s: float, run_one: Callable[[str, int], None],
          max_rounds: int = 3, picked: Callable[[str], list[str]] | None = None,
          clock: Callable[[], float] = time.monotonic, say: Callable[[str], None] = print) -> list[tuple[str, int]]:
    """Run ``names`` in order of need while they fit ``budget_s`` (``gpu_workloads.results.plan``, planned again before
    each workload with the time really left): ``run_one(name, units)`` runs one; ``picked(name)``: the
    contestants it races (default all). The (workload, units) that ran."""
    picked = picked or (lambda n: list(WORKLOADS[n].contestants))  # reference peers (Workload.first) included
    start = clock()
    unit = {n: unit_cost(results, n, WORKLOADS[n].unit_cost_s) for n in names}
    rounds = {n: min(max_rounds, WORKLOADS[n].max_rounds or 1) for n in names if WORKLOADS[n].max_rounds}
    ran: list[tuple[str, int]] = []
    while True:
        left = budget_s - (clock() - start)
        todo = {n: picked(n) for n in names if n not in {r for r, _ in ran}}
        sizes = {n: len(c) for n, c in todo.items()}
        chosen = plan(need_order(results, todo), unit.__getitem__, sizes.__getitem__, rounds, left)
        if not chosen:
            break
        name, n = chosen[0]
        what = f"{n} round{'s' if n > 1 else ''}" if name in rounds else f"{n} contestant{'s' if n > 1 else ''}"
        say(f"== {name}: {what}, expected {unit[name] * n:.0f} s, {left:.0f} s left")
        run_one(name, n)
        ran.append((name, n))
    for name in names:
        if name not in {r for r, _ in ran}:
            say(f"== {name}: skipped, expected {unit[name]:.0f} s per {'round' if name in rounds else 'contestant'}, "
                f"{budget_s - (clock() - start):.0f} s left")
    return ran


def run(a: argparse.Namespace) -> int:
    """Every workload the queue picks, its run file written as it goes and its table printed after it."""
    results = {"workloads": {}, "rows": []} if a.quick else load(a.results)
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="runner-gpu-bench-") as scratch:
        # One Inductor/Triton cache per run, shared by its processes unless a job names its own (hf_varlen's and
        # cold_start's compile cold): later GPT rounds reuse the graphs the first compiled.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(scratch) / "inductor")
        os.environ["TRITON_CACHE_DIR"] = str(Path(scratch) / "triton")
        if a.quick:  # plumbing only: one OpenMP thread each, so neighbours' load cannot stall spin-waits
            os.environ["OMP_NUM_THREADS"] = "1"
        ctx = Context(a.quick, a.backend, Path(scratch), time.monotonic() + a.budget_s, {"results": results},
                      frozenset(a.contestants))

        def run_one(name: str, n: int) -> None:
            out = RunFile(a.out_dir / f"{name}.json", WORKLOADS[name], ctx, n if WORKLOADS[name].max_rounds else 1)
            try:
                WORKLOADS[name].run(ctx, out, n)
            except Exception:  # a broken workload must not cost the session the ones after it
                failed.append(name)
                print(f"{name}: FAILED\n{traceback.format_exc()}", flush=True)
            shown = {"workloads": {name: out.data}, "rows": [{"workload": name, **r, "date": out.data["date"],
                                                             "device": out.data["device"]} for r in out.data["rows"]]}
            failed.extend(f"{name}/{r['contestant']}" for r in out.data["rows"] if "error" in r)
            print(f"\n{table(WORKLOADS[name], shown)}\n", flush=True)

        ran = queue(a.workloads, results, a.budget_s, run_one, max_rounds=a.rounds or (1 if a.quick else 3),
                    picked=lambda n: ctx.pick(list(WORKLOADS[n].contestants), WORKLOADS[n].first))
    print(f"ran {', '.join(f'{n} ({k})' for n, k in ran) or 'nothing'}; rows in {a.out_dir}"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def merge_files(paths: list[Path], results_path: Path, docs: Path) -> int:
    """Fold run files into the results and rewrite the docs' tables; refuses ``--quick`` runs (plumbing)."""
    results = load(results_path)
    for path in paths:
        data = json.loads(path.read_text())
        if data.get("quick"):
            print(f"{path}: a --quick run measures plumbing on the CPU, not a GPU: not merged", file=sys.stderr)
            return 2
        for line in merge(results, data, order_key):
            print(line)
    write_json(results_path, results)
    docs.write_text(render(docs.read_text(), results, WORKLOADS))
    print(f"wrote {results_path} and the tables of {docs}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="every workload on the CPU at tiny sizes (plumbing)")
    p.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=None,
                   help="default: all (--quick: all but gpt_124m, the same tiny GPT as gpt_small there)")
    p.add_argument("--contestants", nargs="+", default=[], help="race only these where a workload has any of them "
                   "(its reference peers always run: eager Lightning, the GPT workloads' two)")
    p.add_argument("--budget-s", type=float, default=math.inf, help="start nothing expected to end past this")
    p.add_argument("--rounds", type=int, default=None, help="at most this many GPT rounds (default 3; 1 --quick)")
    p.add_argument("--backend", default=None, help="torch.compile backend (default inductor; aot_eager with --quick)")
    p.add_argument("--out-dir", type=Path, default=None, help=f"run files (default gpu-out/rows; {QUICK_OUT} --quick)")
    p.add_argument("--results", type=Path, default=RESULTS, help="the results the need order reads and --merge writes")
    p.add_argument("--docs-path", type=Path, default=DOCS, help="the page --docs and --merge rewrite")
    p.add_argument("--merge", nargs="+", type=Path, help="fold these run files into --results; rewrite the docs")
    p.add_argument("--docs", action="store_true", help="rewrite the docs' tables from --results")
    p.add_argument("--check", action="store_true", help="with --docs: exit 1 when the tables are out of date")
    a = p.parse_args(argv)
    if a.merge:
        return merge_files(a.merge, a.results, a.docs_path)
    if a.docs:
        text = a.docs_path.read_text()
        new = render(text, load(a.results), WORKLOADS)
        if a.check:
            return int(new != text)
        a.docs_path.write_text(new)
        return 0
    a.workloads = a.workloads or [w for w in WORKLOADS if not (a.quick and w == "gpt_124m")]
    a.backend = a.backend or ("aot_eager" if a.quick else "inductor")
    a.out_dir = a.out_dir or (QUICK_OUT if a.quick else Path("gpu-out") / "rows")
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
