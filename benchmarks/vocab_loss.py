"""torch's two ways to chunk a large vocabulary's loss, on the loss alone: which one runner uses, and why.

    .venv/bin/python benchmarks/vocab_loss.py           # 4,096 positions x 128 wide, 32,000 and 128,256 ids, Inductor
    .venv/bin/python benchmarks/vocab_loss.py --quick   # tiny, Dynamo's eager backend (plumbing)

The loss of ``[positions x width]`` hidden states through a ``[vocab x width]`` output layer, forward and backward,
compiled, three ways, each variant in a process of its own (its peak resident set is its own), in turn:

- ``whole``: ``F.cross_entropy(F.linear(h, w).float(), y)``, the whole logits (what Lightning's users compile);
- ``functional:R``: ``torch.nn.functional.linear_cross_entropy`` with chunks of ``R`` positions (runner's
  ``runner.losses.linear_cross_entropy``): a custom op, opaque to Inductor, that computes the gradients chunk by
  chunk in its forward;
- ``chunker:N``: the whole logits' loss with Inductor's ``auto_chunker`` on, ``N`` chunks (a pass over the joint
  graph: Inductor, a forward and backward in one graph, static shapes only).

Per variant: the median step of ``--steps`` after the first (the compile), and the peak resident set above what the
process held before the step (``VmHWM``, reset before each step). The hidden states' width is runner's llama_tiny's,
so the loss is most of the work, as for the small models the CPU trains. Writes ``benchmarks/results/vocab_loss.json``
(``--out``; none with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "vocab_loss.json"
VARIANTS = ["whole", "functional:512", "functional:2048", "chunker:8"]


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def worker(variant: str, tokens: int, width: int, vocab: int, backend: str, steps: int) -> dict[str, Any]:
    """One variant in this process: its step times and its peak above the resident set before each step."""
    import gc

    import torch

    from runner.losses import linear_cross_entropy
    from runner.torch_internals import observation, settings

    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(vocab, width) * 0.02)
    hidden0 = torch.randn(tokens, width) * 0.5
    targets = torch.randint(0, vocab, (tokens,))
    targets[::7] = -100
    kind, _, n = variant.partition(":")
    options: dict[str, Any] = {}
    if kind == "functional":
        def loss(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return linear_cross_entropy(h, weight, y, rows=int(n))
    else:
        def loss(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return linear_cross_entropy(h, weight, y)  # rows=None: the whole logits
        options = settings.auto_chunker_options(int(n)) if kind == "chunker" and backend == "inductor" else {}
    step = torch.compile(loss, backend=backend, **({"options": options} if options else {}))
    times, peaks = [], []
    for _ in range(steps):
        hidden = hidden0.clone().requires_grad_(True)
        weight.grad = None
        gc.collect()
        base = _status_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        start = time.perf_counter()
        step(hidden, targets).backward()
        times.append(time.perf_counter() - start)
        peaks.append((_status_kib("VmHWM") - base) / 1024)
    counters = observation.counters_snapshot()
    return {"variant": variant, "tokens": tokens, "width": width, "vocab": vocab, "first_s": times[0],
            "step_ms": 1e3 * statistics.median(times[1:]), "peak_mib": max(peaks[1:]),
            "logits_mib": 4 * tokens * vocab / 2**20,
            "graph_breaks": sum(observation.graph_break_counts(counters).values()),
            "chunked_graphs": _chunked_graphs()}


def _chunked_graphs() -> int:
    """Graphs Inductor's auto-chunker cut (its own metric)."""
    from torch._inductor import metrics

    return int(getattr(metrics, "num_auto_chunking", 0))


def run_one(variant: str, vocab: int, a: argparse.Namespace) -> dict[str, Any]:
    """``worker`` in a process of its own."""
    args = [sys.executable, str(Path(__file__)), "--worker", variant, str(vocab), "--tokens", str(a.tokens),
            "--width", str(a.width), "--backend", a.backend, "--steps", str(a.steps)]
    env = {**os.environ, "PYTHONPATH": f"{HERE.parent}{os.pathsep}{HERE}"}
    proc = subprocess.run(args, cwd=HERE.parent, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"variant": variant, "vocab": vocab, "error": proc.stderr.strip().splitlines()[-3:]}
    return json.loads(lines[-1].removeprefix("RESULT "))  # type: ignore[no-any-return]


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| vocabulary | variant | step ms | peak above the step's start MiB | one copy of the logits MiB | "
           "graph breaks | graphs the chunker cut |", "|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['vocab']:,} | {r['variant']} | error: {' '.join(r['error'])} | | | | |")
            continue
        out.append(f"| {r['vocab']:,} | {r['variant']} | {r['step_ms']:,.0f} | {r['peak_mib']:,.0f} | "
                   f"{r['logits_mib']:,.0f} | {r['graph_breaks']} | {r['chunked_graphs']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--backend", default=None, help="default: inductor (--quick: eager)")
    p.add_argument("--vocabs", type=int, nargs="+", default=None)
    p.add_argument("--variants", nargs="+", default=VARIANTS)
    p.add_argument("--tokens", type=int, default=None)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None, help="each variant's process this many times, in turn")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--worker", nargs=2, metavar=("VARIANT", "VOCAB"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.backend = a.backend or ("eager" if a.quick else "inductor")
    a.tokens = a.tokens or (256 if a.quick else 4096)
    a.steps = a.steps or (3 if a.quick else 5)
    a.rounds = a.rounds or (1 if a.quick else 2)
    vocabs = a.vocabs or ([1_000] if a.quick else [32_000, 128_256])
    if a.worker:
        print("RESULT " + json.dumps(worker(a.worker[0], a.tokens, a.width, int(a.worker[1]), a.backend, a.steps)))
        return
    rows = []
    for vocab in vocabs:
        for r in range(a.rounds):
            for variant in a.variants if r % 2 == 0 else a.variants[::-1]:
                rows.append({**run_one(variant, vocab, a), "round": r})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    out = a.out or (None if a.quick else OUT)
    if out is not None:
        given = argv if argv is not None else sys.argv[1:]
        out.write_text(json.dumps({"command": " ".join(["python", "benchmarks/vocab_loss.py", *given]),
                                   "method": __doc__, "rows": rows}, indent=2) + "\n")
    print(table(sorted(rows, key=lambda r: (r["vocab"], VARIANTS.index(r["variant"])
                                              if r["variant"] in VARIANTS else 99, r.get("round", 0)))))


if __name__ == "__main__":
    main()
