"""Dynamic-shape policies on per-document stdlib batches, Inductor, this machine.

    .venv/bin/python benchmarks/dynamic_shapes.py            # every policy, both batch orders
    .venv/bin/python benchmarks/dynamic_shapes.py --steps 40 --policies static dynamic --orders random

Each (policy, order) trains the quickstart GPT (``runner.models.gpt.GPT`` defaults: 4 layers, 128
wide, block 256) on per-document batches of the stdlib source (split at blank lines, seq_len 256,
batch 8) through ``CompileStrategy`` with Inductor, in its own process with an empty Inductor cache,
so compile times are cold and Dynamo state is fresh. Figures come from the shape-policy component's
``figures()`` and a step timer. Orders: ``random`` is the data module's shuffled batches; ``grouped``
is ``data.length_grouping=64`` (chunks sorted by length within windows of 64 batches, the batches
then shuffled), which is what makes short batches, and so the dynamic policies, pay off. Prints a markdown table; writes
``benchmarks/results/dynamic_shapes.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ["static", "bucket", "automatic", "dynamic", "unbacked"]
ORDERS = ["random", "grouped"]
SEQ_LEN, BATCH, BUCKETS = 256, 8, [64, 128, 192, 256]


def _worker(policy: str, order: str, steps: int) -> dict[str, Any]:
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import Callback

    from runner.config.schema import Background, CompileConfig, DynamicConfig, OptimizerPolicy, Scope, ShapePolicy
    from runner.data.text import TextDataModule
    from runner.models.gpt import GPT
    from runner.stack.dynamic import resolve_pad_to
    from runner.strategy import CompileStrategy
    from runner.training.module import TrainModule

    class StepTimer(Callback):
        def __init__(self) -> None:
            self.ms: list[float] = []
            self._t = 0.0

        def on_train_batch_start(self, *args: Any) -> None:
            self._t = time.perf_counter()

        def on_train_batch_end(self, *args: Any) -> None:
            self.ms.append(1000 * (time.perf_counter() - self._t))

    cfg = DynamicConfig(policy=ShapePolicy(policy), buckets=BUCKETS, max=SEQ_LEN)
    torch.manual_seed(0)
    module = TrainModule(GPT(block_size=SEQ_LEN), optimizer=partial(torch.optim.AdamW, lr=1e-3))
    data = TextDataModule(batching="documents", seq_len=SEQ_LEN, batch_size=BATCH, pad_to=resolve_pad_to(cfg, SEQ_LEN),
                          length_grouping=64 if order == "grouped" else 0)
    compile_cfg = CompileConfig(scope=Scope.step, backend="inductor", optimizer=OptimizerPolicy.fused,
                                background=Background.disabled)  # the table times compiled steps
    strategy = CompileStrategy(compile=compile_cfg, dynamic=cfg, device="cpu")
    timer = StepTimer()
    trainer = L.Trainer(accelerator="cpu", strategy=strategy, max_steps=steps, logger=False, limit_val_batches=0,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[timer])
    trainer.fit(module, data)
    s = strategy.stack.figures()
    return {
        "policy": policy, "order": order, "steps": trainer.global_step,
        "graphs": s["dynamic/graphs"], "recompiles": s["dynamic/recompiles"],
        "recompile_reasons": s["dynamic/recompile_reasons"], "compile_s": s["dynamic/compile_s"],
        "median_step_ms": round(statistics.median(timer.ms), 1),
        "median_step_ms_after_compile": round(statistics.median(timer.ms[len(timer.ms) // 2:]), 1),
        "padding_waste_pct": s["dynamic/padding_waste_pct"],
        "final_loss": float(trainer.callback_metrics.get("train/loss", float("nan"))),
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),  # this machine is shared: read step times with it
    }


def _run_one(policy: str, order: str, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="inductor-cold-") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, __file__, "--worker", policy, order, "--steps", str(steps)],
                              cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"policy": policy, "order": order, "error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(lines[-1].removeprefix("RESULT "))


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| order | policy | graphs | compile s | median step ms | median step ms, 2nd half | padding waste % |\n"
            "|---|---|---:|---:|---:|---:|---:|")
    body = [f"| {r['order']} | {r['policy']} | error: {r['error']} | | | | |" if "error" in r else
            f"| {r['order']} | {r['policy']} | {r['graphs']} | {r['compile_s']:.1f} | {r['median_step_ms']:.1f} | "
            f"{r['median_step_ms_after_compile']:.1f} | {r['padding_waste_pct']:.1f} |" for r in rows]
    return "\n".join([head, *body])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--policies", nargs="+", default=POLICIES, choices=POLICIES)
    p.add_argument("--orders", nargs="+", default=ORDERS, choices=ORDERS)
    p.add_argument("--worker", nargs=2, metavar=("POLICY", "ORDER"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        policy, order = a.worker
        print("RESULT " + json.dumps(_worker(policy, order, a.steps)), flush=True)
        return
    rows = []
    for order in a.orders:
        for policy in a.policies:
            rows.append(_run_one(policy, order, a.steps))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    import torch

    out = ROOT / "benchmarks" / "results" / "dynamic_shapes.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"torch": torch.__version__, "cpus": os.cpu_count(), "steps": a.steps, "seq_len": SEQ_LEN,
            "batch_size": BATCH, "buckets": BUCKETS, "model": "GPT defaults (4x128, block 256)", "backend": "inductor"}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(table(rows))
    print(f"\n{out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
