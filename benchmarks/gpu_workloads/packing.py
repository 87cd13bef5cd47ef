"""The ``packing`` workload of ``gpu.py``: a Llama-style causal LM (bf16, seq 2048) on the stdlib's paragraphs,
padded per batch against packed rows; real tokens per second (the tokens in the loss), padding, recompiles, CUDA
graphs. Its job runs ``packing.py``'s workload (the CPU benchmark's, on the GPU, ``runner_*`` with CUDA graphs;
``runner_packed`` through FlexAttention's block mask: ``model.attn_implementation=flex_attention``).

Targets (the issue's): runner_packed >= 2.0x runner's best padded policy and >= 2.5x the best Lightning contestant
in real tokens/s, 0 recompiles, one CUDA-graph recording of the step.
"""

from __future__ import annotations

from typing import Any

from gpu_workloads.common import Column, Context, Row, cell, fmt
from gpu_workloads.specs import cache_env, one_job_row, per_contestant

SIZE: dict[str, Any] = {"seq": 2048, "batch": 8, "max_bytes": None, "examples": None, "warmup": 10, "timed": 50,
                        "llama": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12,
                                  "num_attention_heads": 12, "num_key_value_heads": 12, "vocab_size": 256}}
QUICK: dict[str, Any] = {**SIZE, "seq": 64, "batch": 2, "max_bytes": 60_000, "warmup": 2, "timed": 3,
                         "llama": {**SIZE["llama"], "hidden_size": 32, "intermediate_size": 64,
                                   "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2}}
CONTESTANTS = {
    "lightning": "Lightning, eager, padded per batch",
    "runner_packed": "CompileStrategy on packed rows (data.packing=true, FlexAttention, cudagraphs=reduce_overhead)",
    "lightning_compile": "Lightning + torch.compile(model) + fused AdamW, padded per batch",
    "runner_bucket": "CompileStrategy(dynamic=bucket, cudagraphs=reduce_overhead)",
}


def packing(name: str, size: dict[str, Any], device: str, backend: str) -> dict[str, Any]:
    """One contestant (a job run by ``gpu_workloads/child.py``)."""
    import torch
    from packing import workload

    from runner.config.schema import CudaGraphMode, CudaGraphsConfig
    from runner.models.hf import CausalLM

    torch.manual_seed(0)
    attn = "flex_attention" if name == "runner_packed" and device == "cuda" else "sdpa"
    model = CausalLM("llama", overrides={**size["llama"], "max_position_embeddings": size["seq"]},
                     attn_implementation=attn)
    graphs = {"cudagraphs": CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead)} if device == "cuda" else {}
    return workload(name, "stdlib", size, model, device, backend, runner=graphs)


def _jobs(ctx: Context, name: str) -> list[dict[str, Any]]:
    return [{"call": "gpu_workloads.packing:packing",
             "args": {"device": ctx.device, "backend": ctx.backend, "name": name, "size": QUICK if ctx.quick else SIZE},
             "env": cache_env(ctx, "packing", name)}]


def _vs(rows: list[Row], row: Row, peers: tuple[str, ...]) -> float | None:
    """This row's real tokens/s over the best of ``peers`` measured on the same device."""
    rates = [r["real_tokens_per_s"] for r in rows if r["contestant"] in peers and r.get("real_tokens_per_s")
             and r.get("device") == row.get("device")]
    return row["real_tokens_per_s"] / max(rates) if rates and row.get("real_tokens_per_s") else None


def _targets(rows: list[Row]) -> list[str]:
    packed = next((r for r in rows if r["contestant"] == "runner_packed" and "error" not in r), None)
    if packed is None:
        return []
    out = []
    for peers, target, what in ((("runner_bucket",), 2.0, "runner's best padded policy"),
                                (("lightning", "lightning_compile"), 2.5, "the best Lightning contestant")):
        x = _vs(rows, packed, peers)
        if x is not None:
            out.append(f"runner_packed: {x:.2f}x the real tokens/s of {what} (target >= {target}x: "
                       f"{'met' if x >= target else 'missed'})")
    out.append(f"runner_packed: {packed['recompiles']} recompiles, {packed['cudagraph_recordings']} CUDA-graph "
               f"recordings, padding {packed['padding_pct']:.2f}%")
    return out


def _describe(quick: bool) -> str:
    s = QUICK if quick else SIZE
    return (f"Llama-style causal LM ({s['llama']['num_hidden_layers']} layers x {s['llama']['hidden_size']}), "
            f"stdlib paragraphs (UTF-8 bytes, cut at {s['seq']}), batch {s['batch']}, {s['warmup']} warm-up + "
            f"{s['timed']} timed steps: padded per batch, to buckets, or packed")


COLUMNS: list[Column] = [
    ("real tokens/s", fmt("real_tokens_per_s", ",.0f")), ("step ms", fmt("step_ms", ".1f")),
    ("padding %", fmt("padding_pct", ".1f")), ("recompiles", fmt("recompiles", "d")),
    ("CUDA graphs recorded", fmt("cudagraph_recordings", "d")),
    ("vs runner_bucket", lambda r, rows: cell(_vs(rows, r, ("runner_bucket",)), ".2f")),
]
PACKING = per_contestant("packing", _describe, CONTESTANTS, 120.0, _jobs, one_job_row, 900, COLUMNS, _targets,
                         first=("lightning",))
