"""What runner's shape agreement adds to a training step under 2, 4 and 8 CPU ranks (gloo, localhost).

Each world size runs as its own set of processes (one thread each). Every rank trains a small GPT by
hand, DDP-style: forward, backward, one all-reduce of the flattened gradients, an SGD step, on batches
whose length varies on every rank from step 2 on. Four variants of the step run in the same processes,
interleaved in rotated rounds, so the machine's noise hits all of them:

* ``none``: no agreement (what static shapes need);
* ``int_all_reduce``: one blocking all-reduce of one integer per step (the floor for any agreement
  that waits on its ranks);
* ``agreement``: runner's ``ShapeAgreement.observe`` after the lengths' first change was agreed on, the
  dim dynamic on every rank: an asynchronous one-integer all-reduce read one step later;
* ``all_gather_object``: what ``ShapeAgreement`` did before (every rank's shapes, pickled, every step).

Each variant's time per step is the median over its steps, per rank, then the slowest rank's (a step
is as slow as its slowest rank); the overheads are against ``none`` of the same run. Nothing here is
compiled: the agreement's cost does not depend on what the step compiles.

    .venv/bin/python benchmarks/shape_agreement.py                 # 2, 4, 8 ranks; writes the results
    .venv/bin/python benchmarks/shape_agreement.py --ranks 2 --quick
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.models.gpt import GPT  # noqa: E402
from runner.stack.dynamic.agreement import ShapeAgreement  # noqa: E402

VARIANTS = ("none", "int_all_reduce", "agreement", "all_gather_object")
RESULTS = ROOT / "benchmarks" / "results"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _length(rank: int, step: int) -> int:
    """32 at the first two steps; then a different length on every rank and every step (24-40)."""
    return 32 if step < 2 else 24 + (7 * step + 5 * rank) % 17


def _rank(rank: int, world: int, port: int, steps: int, rounds: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = GPT(n_layer=2, n_embd=64, n_head=2, block_size=64)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-3)
    agreement = ShapeAgreement(dist.new_group(backend="gloo"))
    g = torch.Generator().manual_seed(rank)
    step = 0

    def train_step(variant: str) -> float:
        nonlocal step
        n = _length(rank, step)
        x = torch.randint(0, 256, (4, n + 1), generator=g)
        shapes = [(4, n), (4, n)]
        start = time.perf_counter()
        if variant == "agreement":
            agreement.observe(shapes)
        elif variant == "int_all_reduce":
            dist.all_reduce(torch.tensor([n]), op=dist.ReduceOp.MAX)
        elif variant == "all_gather_object":
            gathered: list[Any] = [None] * world
            dist.all_gather_object(gathered, shapes)
        logits = model(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        flat = torch.cat([p.grad.flatten() for p in params if p.grad is not None])
        dist.all_reduce(flat)
        opt.step()
        step += 1
        return (time.perf_counter() - start) * 1000.0

    for _ in range(6):  # warm-up; the agreement sees the first change (step 2) and agrees on it
        train_step("agreement")
    assert agreement.dynamic, "the lengths' change was not agreed on"
    exchanges = agreement.exchanges
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        for variant in VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]:
            times[variant] += [train_step(variant) for _ in range(steps)]
    agreement.close()
    mine = {v: statistics.median(ms) for v, ms in times.items()}
    mine["exchanges_after_agreed"] = agreement.exchanges - exchanges
    gathered_all: list[Any] = [None] * world
    dist.all_gather_object(gathered_all, mine)
    if rank == 0:
        Path(out).write_text(json.dumps(gathered_all))
    dist.destroy_process_group()


def measure(world: int, steps: int, rounds: int) -> dict[str, Any]:
    """One world size: the slowest rank's median step per variant, and overheads against ``none``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "ranks.json")
        mp.spawn(_rank, args=(world, _free_port(), steps, rounds, out), nprocs=world)
        ranks = json.loads(Path(out).read_text())
    row: dict[str, Any] = {"ranks": world, "steps_per_variant": steps * rounds}
    for v in VARIANTS:
        row[f"{v}_ms"] = max(r[v] for r in ranks)
    for v in VARIANTS[1:]:
        row[f"{v}_overhead_pct"] = 100.0 * (row[f"{v}_ms"] / row["none_ms"] - 1.0)
    row["exchanges_after_agreed"] = max(r["exchanges_after_agreed"] for r in ranks)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| ranks | none [ms] | one int all-reduce [ms] | agreement [ms] | all_gather_object [ms] "
            "| agreement vs none | int all-reduce vs none | all_gather_object vs none | exchanges after agreed |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['ranks']} | {r['none_ms']:.2f} | {r['int_all_reduce_ms']:.2f} | {r['agreement_ms']:.2f} "
                     f"| {r['all_gather_object_ms']:.2f} | {r['agreement_overhead_pct']:+.1f}% "
                     f"| {r['int_all_reduce_overhead_pct']:+.1f}% | {r['all_gather_object_overhead_pct']:+.1f}% "
                     f"| {r['exchanges_after_agreed']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--steps", type=int, default=20, help="steps per variant per round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="3 steps x 2 rounds; writes nothing")
    args = parser.parse_args()
    steps, rounds = (3, 2) if args.quick else (args.steps, args.rounds)
    rows = [measure(world, steps, rounds) for world in args.ranks]
    text = table(rows)
    print(text)
    if not args.quick:
        RESULTS.mkdir(parents=True, exist_ok=True)
        meta = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                "command": " ".join(["python benchmarks/shape_agreement.py", *sys.argv[1:]]), "rows": rows}
        (RESULTS / "shape_agreement.json").write_text(json.dumps(meta, indent=2) + "\n")
        (RESULTS / "shape_agreement.md").write_text(
            f"# Shape agreement per step ({meta['date']}, torch {meta['torch']}, `{meta['command']}`)\n\n{text}\n")


if __name__ == "__main__":
    main()
