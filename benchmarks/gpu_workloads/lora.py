"""The ``lora`` workload of ``gpu.py``: one Llama-style model fine-tuned with LoRA through runner, through HF peft
in Lightning (eager and compiled), in full, and with QLoRA; step time against the best Lightning + peft contestant.

The contestants are ``contestants/adapters.py``'s (the CPU benchmark's, ``lora_qlora.py``), bf16-mixed on the GPU,
each in a fresh child process with a compile cache of its own; a contestant's row is its steady step time over the timed
steps after its warm-up (compiles included there), tokens/s, peak memory, the optimizer's state, the graph breaks
and recompiles of its process. Targets (issue 70): runner LoRA >= 1.3x the best Lightning + peft contestant's
tokens/s, >= 1.35x runner's full fine-tune; QLoRA >= 0.85x LoRA. The driver side (this module's top level) imports
no torch; ``lora_job`` runs in ``gpu_workloads/child.py``.
"""

from __future__ import annotations

from typing import Any

from gpu_workloads.common import Column, Context, Row, cell, fmt, ratio
from gpu_workloads.specs import cache_env, one_job_row, per_contestant

LORA: dict[str, Any] = {"hidden": 1024, "intermediate": 2816, "layers": 24, "heads": 16, "seq": 1024, "batch": 8,
                        "vocab": 32000, "warmup": 10, "timed": 30}
LORA_QUICK: dict[str, Any] = {"hidden": 64, "intermediate": 128, "layers": 1, "heads": 2, "seq": 32, "batch": 2,
                              "vocab": 256, "warmup": 2, "timed": 3}
# In the order a short session should measure them: a peft peer, then runner's answer to it.
CONTESTANTS = {
    "lightning_peft_compile": "Lightning + HF peft + torch.compile(model) in the module + fused AdamW",
    "runner_lora": "CompileStrategy() with runner.peft.apply_peft (peft=lora)",
    "runner_full": "CompileStrategy(), every weight trained",
    "runner_qlora": "CompileStrategy() with peft=qlora (NF4 base weights)",
    "lightning_peft": "Lightning + HF peft, eager",
}


def _jobs(ctx: Context, name: str) -> list[dict[str, Any]]:
    return [{"call": "gpu_workloads.lora:lora_job",
             "args": {"name": name, "size": LORA_QUICK if ctx.quick else LORA, "device": ctx.device,
                      "backend": ctx.backend},
             "env": cache_env(ctx, "lora", name)}]


def lora_job(name: str, size: dict[str, Any], device: str, backend: str) -> dict[str, Any]:
    """Train contestant ``name`` for ``size["warmup"] + size["timed"]`` steps on random token windows; its row."""
    import torch
    from contestants.adapters import Size, causal_lm, hf_peft, measured, runner_peft
    from contestants.compare import _adamw
    from torch.utils.data import DataLoader, TensorDataset

    from gpu_workloads.contestant import BenchModule, Marks, bench_trainer, contestant, device_name
    from runner.config.schema import Background, CompileConfig
    from runner.config.schema.peft import PeftMethod
    from runner.torch_internals import observation

    s = Size(size["hidden"], size["intermediate"], size["layers"], size["heads"], size["seq"], size["batch"],
             size["vocab"])
    warmup, end = size["warmup"], size["warmup"] + size["timed"]
    observation.keep_compilation_metrics(10_000)
    torch.manual_seed(0)
    model = causal_lm(s)
    method = {"runner_lora": PeftMethod.lora, "runner_qlora": PeftMethod.qlora}.get(name)
    if name.startswith("lightning"):
        model = hf_peft(model)
        peer = "lightning_compile_fused" if name.endswith("compile") else "lightning"
        compile_kwargs, adamw, strategy = contestant(peer, device, backend)
    else:
        model = runner_peft(model, method) if method else model
        compile_kwargs, adamw, strategy = contestant(name, device, backend,
                                                     compile=CompileConfig(background=Background.disabled))
    ids = torch.randint(0, s.vocab, (s.batch * end, s.seq + 1), generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=s.batch, pin_memory=device == "cuda")
    marks = Marks([warmup, end], device)
    module = BenchModule(compile_kwargs, model=model, optimizer=_adamw(**adamw))
    before = observation.counters_snapshot()
    trainer = bench_trainer(device, strategy, end, [marks])
    trainer.fit(module, loader)
    step_s = (marks.times[end] - marks.times[warmup]) / size["timed"]
    tokens = s.batch * s.seq
    return {"step_ms": 1e3 * step_s, "tokens_per_s": tokens / step_s, "warmup_s": marks.times[warmup] - marks.times[0],
            "compiles_after_warmup": marks.between(warmup, end, "compiles"),
            **measured(module.model, trainer.optimizers, before), "device": device_name(device)}


def _best_peft(rows: list[Row], row: Row) -> float | None:
    """Tokens/s of ``row`` over the best Lightning + peft contestant's (same device)."""
    peers = [r for r in rows if r["contestant"].startswith("lightning") and r.get("tokens_per_s")
             and r.get("device") == row.get("device")]
    return row["tokens_per_s"] / max(r["tokens_per_s"] for r in peers) if peers and row.get("tokens_per_s") else None


def _speed(rows: list[Row], name: str, peer: str) -> float | None:
    """Tokens/s of contestant ``name`` over ``peer``'s (same device)."""
    row = next((r for r in rows if r["contestant"] == name), None)
    return ratio(rows, "tokens_per_s", peer, row) if row else None


def _targets(rows: list[Row]) -> list[str]:
    out = []
    lora = next((r for r in rows if r["contestant"] == "runner_lora" and r.get("tokens_per_s")), None)
    for what, x, goal in (
            ("runner_lora / best Lightning + peft", _best_peft(rows, lora) if lora else None, 1.3),
            ("runner_lora / runner_full", _speed(rows, "runner_lora", "runner_full"), 1.35),
            ("runner_qlora / runner_lora", _speed(rows, "runner_qlora", "runner_lora"), 0.85)):
        if x is not None:
            out.append(f"{what} tokens/s: {x:.3f}x (target >= {goal}x: {'met' if x >= goal else 'missed'})")
    return out


def _describe(quick: bool) -> str:
    s = LORA_QUICK if quick else LORA
    return (f"Llama-style {s['layers']}x{s['hidden']} (MLP {s['intermediate']}, vocab {s['vocab']}), seq {s['seq']}, "
            f"batch {s['batch']}, random tokens; adapter r=16, alpha=32 on every attention and MLP linear; "
            f"{s['warmup']} warm-up + {s['timed']} timed steps")


def _state_mib(row: Row, rows: list[Row]) -> str:
    value = row.get("optimizer_state_bytes")
    return cell(None if value is None else value / 2**20, ",.1f")


COLUMNS: list[Column] = [
    ("step ms", fmt("step_ms", ".1f")), ("tokens/s", fmt("tokens_per_s", ",.0f")),
    ("warm-up s", fmt("warmup_s", ".1f")), ("graph breaks", fmt("graph_breaks", "d")),
    ("recompiles", fmt("recompiles", "d")), ("peak GiB", fmt("peak_gib", ".2f")), ("optimizer state MiB", _state_mib),
    ("vs best Lightning + peft", lambda r, rows: cell(_best_peft(rows, r), ".2f")),
]

LORA_WORKLOAD = per_contestant("lora", _describe, CONTESTANTS, 120.0, _jobs, one_job_row, 900, COLUMNS, _targets,
                               first=("lightning_peft",))
