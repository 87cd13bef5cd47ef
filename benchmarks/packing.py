"""Packed rows against padded batches on the CPU: real tokens per second (the tokens in the loss), the padding
share, recompiles and graphs, on real length distributions.

    .venv/bin/python benchmarks/packing.py                  # both distributions, every contestant, Inductor
    .venv/bin/python benchmarks/packing.py --quick          # a tiny model, a few steps (plumbing)
    .venv/bin/python benchmarks/packing.py --dists instruct --contestants runner_bucket runner_packed

Distributions (their lengths are real, not drawn):

- ``stdlib``: the Python stdlib source's paragraphs (split at blank lines: what the ``hf_varlen`` GPU workload
  reads), byte-level, cut at ``seq_len`` 512 (``data=text_documents``): every target is in the loss;
- ``instruct``: ``examples/data/instruct.jsonl`` in its prompt template (``data=instruct``, ``seq_len`` 256): the
  loss on the answers only, so "real tokens" are the answers' tokens.

The same causal LM (runner's GPT at the quickstart's size, 4 x 128) and the same data for every contestant, each
in its own process with an empty Inductor cache, eager Lightning first:

- ``lightning``: plain Lightning, eager, each batch padded to its longest example;
- ``lightning_compile``: Lightning + ``torch.compile(model)`` and fused AdamW, padded the same way;
- ``runner_bucket``: ``CompileStrategy`` with ``dynamic=bucket`` (buckets at 1/8, 1/4, 1/2 and all of seq_len);
- ``runner_packed``: ``CompileStrategy`` on packed rows (``data.packing=true``): every batch one shape.

Real tokens per second are counted over the timed steps (after the warm-up, which holds the compiles). Targets (the
issue's): runner_packed >= 1.5x runner_bucket's real tokens/s, padding <= 2%. Prints a markdown table and the
ratios; writes ``benchmarks/results/packing.json`` (``--out``). Timings on a shared machine are noise: run it on a
quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHIPPED = ROOT / "examples" / "data" / "instruct.jsonl"
OUT = HERE / "results" / "packing.json"
CONTESTANTS = {
    "lightning": "Lightning, eager, padded per batch",
    "lightning_compile": "Lightning + torch.compile(model) + fused AdamW, padded per batch",
    "runner_bucket": "CompileStrategy(dynamic=bucket)",
    "runner_packed": "CompileStrategy on packed rows (data.packing=true)",
}
SIZES: dict[str, dict[str, Any]] = {
    "stdlib": {"seq": 512, "batch": 8, "max_bytes": 4_000_000, "examples": None, "warmup": 5, "timed": 30},
    "instruct": {"seq": 256, "batch": 16, "max_bytes": None, "examples": None, "warmup": 5, "timed": 30},
}
QUICK: dict[str, dict[str, Any]] = {
    "stdlib": {"seq": 64, "batch": 4, "max_bytes": 60_000, "examples": None, "warmup": 2, "timed": 3},
    "instruct": {"seq": 128, "batch": 4, "max_bytes": None, "examples": 200, "warmup": 2, "timed": 3},
}
MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128}
QUICK_MODEL = {"n_layer": 1, "n_head": 2, "n_embd": 32}


def data_module(dist: str, size: dict[str, Any], packing: bool, pad_to: Any) -> Any:
    """The distribution's data module: padded per ``pad_to``, or packed."""
    if dist == "stdlib":
        from runner.data.text import TextDataModule

        return TextDataModule(batching="documents", seq_len=size["seq"], batch_size=size["batch"],
                              max_bytes=size["max_bytes"], packing=packing, pad_to=pad_to)
    from runner.data.instruct import InstructDataModule

    return InstructDataModule(str(SHIPPED), seq_len=size["seq"], batch_size=size["batch"], packing=packing,
                              max_examples=size["examples"], pad_to=pad_to)


def workload(name: str, dist: str, size: dict[str, Any], model: Any, device: str, backend: str,
             runner: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train ``model`` as contestant ``name`` on ``dist``; its figures. ``runner``: more of runner's config nodes
    (CUDA graphs on a GPU). Shared with the GPU workload (``gpu_workloads/packing.py``)."""
    import torch
    from contestants.compare import _adamw
    from gpu_workloads.contestant import BenchModule, Marks, bench_trainer, contestant, device_name

    from runner.config.schema import Background, CompileConfig, DynamicConfig, ShapePolicy
    from runner.data.sequences.padding import IGNORE_INDEX, PadTo
    from runner.stack.dynamic import resolve_pad_to
    from runner.stack.dynamic.policy import trailing_padding

    seq, warmup, timed = size["seq"], size["warmup"], size["timed"]
    policy = DynamicConfig(policy=ShapePolicy.bucket, buckets=[seq // k for k in (8, 4, 2, 1)]) \
        if name == "runner_bucket" else None
    data = data_module(dist, size, name == "runner_packed", resolve_pad_to(policy, seq) if policy else PadTo())
    data.setup("fit")
    loader = data.train_dataloader()
    # Each batch's targets in the loss, positions and padding (each row's trailing ignored targets: the positions
    # past its examples, packed or padded), counted on the host as the loader makes it.
    seen: list[tuple[int, int, int]] = []
    collate = loader.collate_fn

    def counted(items: Any) -> Any:
        batch = collate(items)
        y = batch[1]
        seen.append((int((y != IGNORE_INDEX).sum()), y.numel(), int(trailing_padding(y))))
        return batch

    loader.collate_fn = counted
    nodes = {"compile": CompileConfig(background=Background.disabled), **({"dynamic": policy} if policy else {}),
             **(runner or {})} if name.startswith("runner") else {}
    compile_kwargs, adamw, strategy = contestant(name, device, backend, **nodes)
    end = warmup + timed
    marks = Marks([warmup, end], device)
    trainer = bench_trainer(device, strategy, end, [marks])
    trainer.fit(BenchModule(compile_kwargs, model=model, optimizer=_adamw(**adamw)), loader)
    wall = marks.times[end] - marks.times[warmup]
    steps = seen[:end]  # Lightning fetches one batch ahead: the first ``end`` batches are the steps'
    real = sum(r for r, _, _ in steps[warmup:])
    positions = sum(n for _, n, _ in steps)
    return {"real_tokens_per_s": real / wall, "step_ms": 1e3 * wall / timed,
            "padding_pct": 100.0 * sum(p for _, _, p in steps) / positions,
            "loss_share_pct": 100.0 * sum(r for r, _, _ in steps) / positions,
            "compiles": marks.counts[end]["compiles"], "recompiles": marks.counts[end]["recompiles"],
            "cudagraph_recordings": marks.counts[end]["graphs"], "loss": float(trainer.callback_metrics["train/loss"]),
            "device": device_name(device), "steps": trainer.global_step,
            "warmup_s": marks.times[warmup] - marks.times[0], "torch": torch.__version__}


def worker(name: str, dist: str, quick: bool, backend: str) -> dict[str, Any]:
    """One contestant on one distribution, in this process (started by :func:`run_one`)."""
    import torch

    from runner.models.gpt import GPT

    size = (QUICK if quick else SIZES)[dist]
    torch.manual_seed(0)
    model = GPT(vocab_size=256, block_size=size["seq"], **(QUICK_MODEL if quick else MODEL))
    return workload(name, dist, size, model, "cpu", backend)


def run_one(name: str, dist: str, quick: bool, backend: str) -> dict[str, Any]:
    """``worker`` in a process of its own with an empty Inductor cache (cold compiles, fresh Dynamo state)."""
    with tempfile.TemporaryDirectory(prefix="inductor-cold-") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"}
        args = [sys.executable, str(Path(__file__)), "--worker", name, dist, "--backend", backend]
        proc = subprocess.run([*args, *(["--quick"] if quick else [])], cwd=ROOT, env=env, capture_output=True,
                              text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"contestant": name, "dist": dist, "error": proc.stderr.strip().splitlines()[-3:]}
    return {"contestant": name, "dist": dist, **json.loads(lines[-1].removeprefix("RESULT "))}


def ratio(rows: list[dict[str, Any]], dist: str, name: str, peer: str) -> float | None:
    """``name``'s real tokens/s over ``peer``'s on ``dist`` (None where either failed)."""
    got = {r["contestant"]: r.get("real_tokens_per_s") for r in rows if r["dist"] == dist}
    return got[name] / got[peer] if got.get(name) and got.get(peer) else None


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| distribution | contestant | real tokens/s | step ms | padding % | in the loss % | compiles | "
            "recompiles | vs runner_bucket | vs lightning_compile |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    body = []
    for r in rows:
        if "error" in r:
            body.append(f"| {r['dist']} | {r['contestant']} | error: {' '.join(r['error'])} | | | | | | | |")
            continue
        vs = [ratio(rows, r["dist"], r["contestant"], p) for p in ("runner_bucket", "lightning_compile")]
        body.append(f"| {r['dist']} | {r['contestant']} | {r['real_tokens_per_s']:,.0f} | {r['step_ms']:.1f} | "
                    f"{r['padding_pct']:.1f} | {r['loss_share_pct']:.1f} | {r['compiles']} | {r['recompiles']} | "
                    + " | ".join("-" if v is None else f"{v:.2f}x" for v in vs) + " |")
    return "\n".join([head, *body])


def targets(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's targets, each a line saying what the rows show."""
    out = []
    for dist in dict.fromkeys(r["dist"] for r in rows):
        x = ratio(rows, dist, "runner_packed", "runner_bucket")
        packed = next((r for r in rows if r["dist"] == dist and r["contestant"] == "runner_packed"), {})
        if x is not None:
            out.append(f"{dist}: runner_packed / runner_bucket real tokens/s = {x:.2f}x (target >= 1.5x: "
                       f"{'met' if x >= 1.5 else 'missed'})")
        if "padding_pct" in packed:
            out.append(f"{dist}: runner_packed padding {packed['padding_pct']:.2f}% (target <= 2%: "
                       f"{'met' if packed['padding_pct'] <= 2 else 'missed'}), {packed['recompiles']} recompiles")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a tiny model and a few steps (plumbing)")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--dists", nargs="+", choices=list(SIZES), default=list(SIZES))
    p.add_argument("--contestants", nargs="+", choices=list(CONTESTANTS), default=list(CONTESTANTS))
    p.add_argument("--out", type=Path, default=None, help=f"default: {OUT.relative_to(ROOT)} (none with --quick)")
    p.add_argument("--worker", nargs=2, metavar=("CONTESTANT", "DIST"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print("RESULT " + json.dumps(worker(*a.worker, a.quick, a.backend)), flush=True)
        return
    rows = []
    for dist in a.dists:
        for name in [c for c in CONTESTANTS if c in a.contestants]:  # eager Lightning first
            rows.append(run_one(name, dist, a.quick, a.backend))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    out = a.out or (None if a.quick else OUT)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        given = argv if argv is not None else sys.argv[1:]
        meta = {"command": " ".join(["python", "benchmarks/packing.py", *given]), "cpus": os.cpu_count(),
                "backend": a.backend, "quick": a.quick, "model": QUICK_MODEL if a.quick else MODEL,
                "sizes": QUICK if a.quick else SIZES, "contestants": CONTESTANTS}
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(table(rows))
    print("\n".join(["", *targets(rows)]))
    if out is not None:
        print(f"\n{out}")


if __name__ == "__main__":
    main()
