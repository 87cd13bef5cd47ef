"""The ``dpo`` workload of ``gpu.py``: LoRA-DPO on the shipped preference pairs, TRL's ``DPOTrainer`` + peft (eager,
and the model compiled in place) against runner (``objective=dpo peft=lora``, pairs padded per batch and packed,
CUDA graphs where the plan turns them on), bf16 on the GPU.

The contestants are ``dpo.py``'s (the CPU benchmark's, ``contestants/dpo.py``), each in a fresh child process with
a compile cache of its own, on a Llama-style model built from its configuration and a BPE tokenizer trained on the
pairs; a contestant's row is its steady step time over the timed steps after its warm-up, pairs/s, peak memory,
graphs and recompiles (after the warm-up too). Target (issue 78): runner >= 1.3x TRL's best in pairs/s, 0 recompiles
after warm-up. TRL runs in the GPU machine's venv (``scripts/gpu_wheels.sh`` carries it). The driver side (this
module's top level) imports no torch; ``dpo_job`` runs in ``gpu_workloads/child.py``.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from gpu_workloads.common import Column, Context, Row, cell, fmt
from gpu_workloads.specs import cache_env, one_job_row, per_contestant

SIZE: dict[str, Any] = {"hidden": 1024, "intermediate": 2816, "layers": 16, "heads": 16, "seq_len": 256, "batch": 16,
                        "warmup": 10, "timed": 30}
QUICK: dict[str, Any] = {"hidden": 32, "intermediate": 64, "layers": 1, "heads": 2, "seq_len": 128, "batch": 2,
                         "warmup": 2, "timed": 3}
# TRL eager first: the tool a user would pick, as it comes.
CONTESTANTS = {
    "trl": "TRL DPOTrainer + peft, eager (the reference: the policy with its adapter disabled)",
    "runner_dpo_packed": "CompileStrategy() with objective=dpo peft=lora on packed pairs (the reference through the "
                         "adapter's gate, in the same step)",
    "trl_compile": "TRL DPOTrainer + peft, the model compiled in place (TRL's torch_compile=True crashes with peft)",
    "runner_dpo_padded": "CompileStrategy() with objective=dpo peft=lora, pairs padded per batch",
}


def dpo_job(name: str, size: dict[str, Any], device: str, backend: str) -> dict[str, Any]:
    """Train contestant ``name`` for ``size["warmup"] + size["timed"]`` steps; its row."""
    from contestants.dpo import Compiles, run_runner, run_trl
    from contestants.pacer import Pacer
    from dpo import PAIRS, tokenizer

    from runner.data.instruct.formats import PAIR_TEMPLATE
    from runner.data.splits import split_documents

    scratch = Path(tempfile.mkdtemp(prefix="dpo-"))
    rows = len(PAIRS.read_text().splitlines())
    spec: dict[str, Any] = {
        "pairs": str(PAIRS), "tokenizer": str(scratch / "tokenizer"), "vocab": tokenizer(scratch / "tokenizer"),
        "size": {k: size[k] for k in ("hidden", "intermediate", "layers", "heads")}, "seq_len": size["seq_len"],
        "batch": size["batch"], "rows_per_batch": max(1, size["batch"] // 2), "rank": 16, "beta": 0.1, "lr": 1e-4,
        "weight_decay": 0.1, "seed": 0, "backend": backend, "warmup": size["warmup"], "template": PAIR_TEMPLATE,
        "rows": [int(i) for i in split_documents(rows, 0.1, 0).train], "scratch": str(scratch),
        "steps": size["warmup"] + size["timed"] + 1, "device": device, "bf16": device == "cuda",
        "compile": "in_place" if name == "trl_compile" else "", "packing": name == "runner_dpo_packed"}
    pacer = Pacer()  # alone: every step timed, no turns
    compiles = Compiles(size["warmup"])
    own = (run_trl if name.startswith("trl") else run_runner)(spec, pacer, compiles)
    steady = pacer.times[size["warmup"]:]
    step_s = statistics.median(steady)
    return {"step_ms": 1e3 * step_s, "pairs_per_step": own["pairs_per_step"],
            "pairs_per_s": own["pairs_per_step"] / step_s, "warmup_s": sum(pacer.times[:size["warmup"]]),
            **compiles.figures(), "device": device}


def _jobs(ctx: Context, name: str) -> list[dict[str, Any]]:
    return [{"call": "gpu_workloads.dpo:dpo_job", "args": {"name": name, "size": QUICK if ctx.quick else SIZE,
                                                           "device": ctx.device, "backend": ctx.backend},
             "env": cache_env(ctx, "dpo", name)}]


def _vs_trl(rows: list[Row], row: Row) -> float | None:
    """Pairs/s of ``row`` over TRL's best contestant's (same device)."""
    peers = [r["pairs_per_s"] for r in rows if r["contestant"].startswith("trl") and r.get("pairs_per_s")
             and r.get("device") == row.get("device")]
    return row["pairs_per_s"] / max(peers) if peers and row.get("pairs_per_s") else None


def _targets(rows: list[Row]) -> list[str]:
    out = []
    for row in rows:
        if not row["contestant"].startswith("runner") or row.get("pairs_per_s") is None:
            continue
        x = _vs_trl(rows, row)
        if x is not None:
            out.append(f"{row['contestant']} / TRL's best pairs/s: {x:.3f}x (target >= 1.3x: "
                       f"{'met' if x >= 1.3 else 'missed'})")
        after = row.get("recompiles_after_warmup")
        out.append(f"{row['contestant']} recompiles after warm-up: {after} (target 0: "
                   f"{'met' if after == 0 else 'missed'})")
    return out


def _describe(quick: bool) -> str:
    s = QUICK if quick else SIZE
    return (f"Llama-style {s['layers']}x{s['hidden']} (MLP {s['intermediate']}), BPE vocabulary 512, seq_len "
            f"{s['seq_len']}, {s['batch']} pairs a step (packed: {max(1, s['batch'] // 2)} rows of "
            f"{2 * s['seq_len']}), examples/data/preference.jsonl; adapter r=16, alpha=32 on every attention and MLP "
            f"linear, beta 0.1; {s['warmup']} warm-up + {s['timed']} timed steps")


COLUMNS: list[Column] = [
    ("step ms", fmt("step_ms", ".1f")), ("pairs/step", fmt("pairs_per_step", ".2f")),
    ("pairs/s", fmt("pairs_per_s", ",.1f")), ("warm-up s", fmt("warmup_s", ".1f")), ("graphs", fmt("graphs", "d")),
    ("recompiles", fmt("recompiles", "d")), ("after warm-up", fmt("recompiles_after_warmup", "d")),
    ("peak GiB", fmt("peak_gib", ".2f")), ("vs TRL's best", lambda r, rows: cell(_vs_trl(rows, r), ".2f")),
]

DPO_WORKLOAD = per_contestant("dpo", _describe, CONTESTANTS, 150.0, _jobs, one_job_row, 900, COLUMNS, _targets)
