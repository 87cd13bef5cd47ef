"""FSDP2 vs DDP on 2 CPU processes (gloo): what each rank holds, and how long a step takes.

The quickstart GPT (4 x 128, seq 256, batch 8 per rank, fused AdamW chosen by ``compile.optimizer=auto``,
``compile=blocks``) is trained by ``DDPCompileStrategy`` and by ``FSDPCompileStrategy``, each as its own
2-process job, in ABBA order over ``--rounds`` (drift on this shared machine hits both alike). Each
rank counts the bytes it holds after an optimizer step, from the tensors themselves (a DTensor counts
its local shard): parameters, gradients (just before the optimizer step) and optimizer state; and
its step times after warm-up. The driver prints per-rank figures and the FSDP/DDP ratios.

    .venv/bin/python benchmarks/fsdp.py                 # Inductor, 2 rounds (~5 min on 2 cores)
    .venv/bin/python benchmarks/fsdp.py --backend eager --rounds 1 --steps 12   # plumbing only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def _local_bytes(tensors: Any) -> int:
    from torch.distributed.tensor import DTensor

    total = 0
    for t in tensors:
        if t is None:
            continue
        t = t.to_local() if isinstance(t, DTensor) else t
        total += t.numel() * t.element_size()
    return total


def child(strategy_name: str, backend: str, steps: int, out: Path) -> None:
    """One 2-rank job (Lightning's launcher re-runs this script, same argv, for rank 1)."""
    import lightning as L
    import torch
    import torch.distributed as dist
    from lightning.pytorch.callbacks import Callback

    from runner.config.schema import CompileConfig, Scope
    from runner.data.text import TextDataModule
    from runner.models.gpt import GPT
    from runner.strategy import DDPCompileStrategy, FSDPCompileStrategy
    from runner.training.module import TrainModule

    class Measure(Callback):
        def __init__(self) -> None:
            self.grad_bytes = 0
            self.figures: dict[str, Any] = {}
            self.times: list[float] = []
            self._t = 0.0

        def on_train_batch_start(self, *args: Any) -> None:
            self._t = time.perf_counter()

        def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
            self.grad_bytes = _local_bytes(p.grad for p in pl_module.parameters())

        def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
            self.times.append(time.perf_counter() - self._t)
            if trainer.global_step == 1:
                opt = trainer.optimizers[0]
                state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
                self.figures = {"param_mib": _local_bytes(pl_module.parameters()) / MIB,
                                "grad_mib": self.grad_bytes / MIB, "optimizer_state_mib": _local_bytes(state) / MIB,
                                "param_type": type(next(pl_module.parameters())).__name__}

    torch.manual_seed(0)
    module = TrainModule(GPT(n_layer=4, n_head=4, n_embd=128, block_size=256),
                         optimizer=lambda params: torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.95)))
    compile_cfg = CompileConfig(scope=Scope.blocks, backend=backend)
    cls = FSDPCompileStrategy if strategy_name == "fsdp" else DDPCompileStrategy
    measure = Measure()
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=cls(compile=compile_cfg, process_group_backend="gloo"),
                        max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[measure])
    trainer.fit(module, TextDataModule(seq_len=256, batch_size=8, max_bytes=2_000_000))
    warm = measure.times[max(2, steps // 3):]
    mine = {**measure.figures, "step_ms": 1e3 * statistics.median(warm),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    mine["held_mib"] = mine["param_mib"] + mine["grad_mib"] + mine["optimizer_state_mib"]
    gathered: list[Any] = [None, None]
    dist.all_gather_object(gathered, mine)
    if trainer.is_global_zero:
        out.write_text(json.dumps(gathered))


def run_job(strategy_name: str, backend: str, steps: int, out: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", strategy_name, "--backend", backend,
           "--steps", str(steps), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{strategy_name} job failed:\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2, help="ABBA rounds (1: DDP then FSDP)")
    ap.add_argument("--child", choices=["ddp", "fsdp"])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fsdp.json")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.backend, args.steps, args.out)
        return
    order = [n for r in range(args.rounds) for n in (("ddp", "fsdp") if r % 2 == 0 else ("fsdp", "ddp"))]
    runs: dict[str, list[list[dict[str, Any]]]] = {"ddp": [], "fsdp": []}
    tmp = args.out.with_suffix(".job.json")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name in order:
        runs[name].append(run_job(name, args.backend, args.steps, tmp))
        print(f"{name}: " + json.dumps(runs[name][-1]), flush=True)
    tmp.unlink(missing_ok=True)

    def per_rank(name: str, key: str) -> float:  # median over rounds of the ranks' mean
        return statistics.median(statistics.mean(r[key] for r in ranks) for ranks in runs[name])

    keys = ["param_mib", "grad_mib", "optimizer_state_mib", "held_mib", "peak_rss_mib", "step_ms"]
    rows = {k: (per_rank("ddp", k), per_rank("fsdp", k)) for k in keys}
    print(f"\nper rank, 2 gloo ranks, backend={args.backend}, {args.rounds} round(s) of {args.steps} steps")
    print("| figure | DDP | FSDP2 | FSDP2 / DDP |\n|---|---:|---:|---:|")
    for k, (d, f) in rows.items():
        print(f"| {k} | {d:.2f} | {f:.2f} | {f / d:.3f} |")
    args.out.write_text(json.dumps({"backend": args.backend, "steps": args.steps, "rounds": args.rounds,
                                    "runs": runs, "ratios": {k: f / d for k, (d, f) in rows.items()}}, indent=1))


if __name__ == "__main__":
    main()
