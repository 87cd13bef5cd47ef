"""The ``vocab`` workload of ``gpu.py``: a Llama-style model with Llama 3's 128,256-id vocabulary fine-tuned in full,
its loss from the whole logits or chunked; the step's CUDA peak memory and tokens/s, against Lightning + compile.

Contestants (``contestants/vocab.py``'s, the CPU benchmark's ``vocab.py``, bf16-mixed on the GPU), each in a fresh
child process with a compile cache of its own, eager Lightning first:

- ``lightning``, ``lightning_compile``: Lightning, eager and with ``torch.compile(model)`` + fused AdamW, whole logits;
- ``runner_whole``: ``CompileStrategy`` with ``loss.chunked=false``;
- ``runner_chunked``: runner's default, ``loss.chunked=auto`` (chunked here: 2 GiB of float32 logits a step);
- ``runner_autochunk``: ``runner_whole`` with Inductor's auto-chunker on (``compile.options``), torch's other way to
  chunk, which runner's measurement on the CPU did not pick (docs/large-vocab.md): measured here on the GPU.

A row: the steady step time over the timed steps after the warm-up (compiles there), tokens/s, the CUDA peak memory
of the timed steps (reset after the warm-up) and of the whole process, graph breaks and recompiles, what runner's
loss was (``loss/*``). The GPU machine's torch 2.11 has no ``torch.nn.functional.linear_cross_entropy``: there
``runner_chunked`` computes the whole logits and its row says why (``loss_reason``). Targets (issue 76):
runner_chunked's step peak >= 35% lower than lightning_compile's at <= 1.02x its step time. The driver side (this
module's top level) imports no torch; ``vocab_job`` runs in ``gpu_workloads/child.py``.
"""

from __future__ import annotations

from typing import Any

from gpu_workloads.common import Column, Context, Row, cell, fmt, ratio
from gpu_workloads.specs import cache_env, one_job_row, per_contestant

VOCAB: dict[str, Any] = {"hidden": 2048, "intermediate": 5632, "layers": 8, "heads": 16, "seq": 2048, "batch": 4,
                         "vocab": 128_256, "warmup": 5, "timed": 20}
VOCAB_QUICK: dict[str, Any] = {"hidden": 32, "intermediate": 64, "layers": 1, "heads": 2, "seq": 64, "batch": 2,
                               "vocab": 4_096, "warmup": 2, "timed": 3}
CONTESTANTS = {
    "lightning": "Lightning eager, whole logits",
    "lightning_compile": "Lightning + torch.compile(model) in the module + fused AdamW, whole logits",
    "runner_chunked": "CompileStrategy(), loss.chunked=auto (the default)",
    "runner_whole": "CompileStrategy(), loss.chunked=false",
    "runner_autochunk": "CompileStrategy(), loss.chunked=false, Inductor's auto_chunker (compile.options)",
}


def _jobs(ctx: Context, name: str) -> list[dict[str, Any]]:
    return [{"call": "gpu_workloads.vocab:vocab_job",
             "args": {"name": name, "size": VOCAB_QUICK if ctx.quick else VOCAB, "device": ctx.device,
                      "backend": ctx.backend},
             "env": cache_env(ctx, "vocab", name)}]


def vocab_job(name: str, size: dict[str, Any], device: str, backend: str) -> dict[str, Any]:
    """Train contestant ``name`` for ``size["warmup"] + size["timed"]`` steps on random token windows; its row."""
    import torch
    from contestants.adapters import Size, causal_lm, measured
    from contestants.compare import _adamw
    from torch.utils.data import DataLoader, TensorDataset

    from gpu_workloads.contestant import BenchModule, Marks, bench_trainer, contestant, device_name
    from runner.config.schema import Background, CompileConfig
    from runner.config.schema.loss import LossConfig
    from runner.config.schema.peft import PeftConfig
    from runner.losses import chunking_unavailable
    from runner.torch_internals import observation, settings
    from runner.training.loss import resolve_loss
    from runner.training.module import TrainModule

    s = Size(size["hidden"], size["intermediate"], size["layers"], size["heads"], size["seq"], size["batch"],
             size["vocab"])
    warmup, end = size["warmup"], size["warmup"] + size["timed"]
    observation.keep_compilation_metrics(10_000)
    torch.manual_seed(0)
    model = causal_lm(s)
    figures: dict[str, Any] = {}
    if name.startswith("lightning"):
        peer = "lightning_compile_fused" if name == "lightning_compile" else "lightning"
        compile_kwargs, adamw, strategy = contestant(peer, device, backend)
        module: Any = BenchModule(compile_kwargs, model=model, optimizer=_adamw(**adamw))
    else:
        options = settings.auto_chunker_options() if name == "runner_autochunk" else {}
        compile_kwargs, adamw, strategy = contestant(
            name, device, backend, compile=CompileConfig(background=Background.disabled, options=options))
        # --quick's logits are too small for auto to chunk them: the plumbing chunks anyway, 4 chunks a step, where
        # this torch can (the GPU machine's torch 2.11 cannot: there auto's whole logits, as the real run has them).
        chunk_anyway = size["vocab"] == VOCAB_QUICK["vocab"] and chunking_unavailable() is None
        loss = LossConfig(chunked=False) if name != "runner_chunked" else \
            LossConfig(chunked=True, chunks=4) if chunk_anyway else LossConfig()
        plan = resolve_loss(model, loss, PeftConfig(), {"batch_size": s.batch, "seq_len": s.seq}, None)
        figures = {k.replace("/", "_"): v for k, v in plan.figures().items()}
        module = TrainModule(model, optimizer=_adamw(**adamw), loss=plan)
    ids = torch.randint(0, s.vocab, (s.batch * end, s.seq + 1), generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=s.batch, pin_memory=device == "cuda")
    marks, step_peak = Marks([warmup, end], device), StepPeakCuda(warmup, device)
    before = observation.counters_snapshot()
    trainer = bench_trainer(device, strategy, end, [marks, step_peak])
    trainer.fit(module, loader)
    step_s = (marks.times[end] - marks.times[warmup]) / size["timed"]
    tokens = s.batch * s.seq
    return {"step_ms": 1e3 * step_s, "tokens_per_s": tokens / step_s, "warmup_s": marks.times[warmup] - marks.times[0],
            "compiles_after_warmup": marks.between(warmup, end, "compiles"), "step_peak_gib": step_peak.peak_gib,
            **measured(module.model, trainer.optimizers, before), **figures, "device": device_name(device)}


class StepPeakCuda:
    """A Lightning callback (built lazily: this module's top level imports no Lightning): the CUDA peak of the
    steps from ``first`` on, reset there; None off CUDA."""

    def __new__(cls, first: int, device: str) -> Any:
        import torch
        from lightning.pytorch.callbacks import Callback

        class _Peak(Callback):
            peak_gib: float | None = None

            def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
                if device == "cuda" and trainer.global_step == first:
                    torch.cuda.reset_peak_memory_stats()

            def on_train_end(self, *args: Any) -> None:
                if device == "cuda":
                    self.peak_gib = round(torch.cuda.max_memory_allocated() / 2**30, 3)

        return _Peak()


def _targets(rows: list[Row]) -> list[str]:
    chunked = next((r for r in rows if r["contestant"] == "runner_chunked" and r.get("step_peak_gib")), None)
    if chunked is None:
        return []
    mem = ratio(rows, "step_peak_gib", "lightning_compile", chunked)
    time = ratio(rows, "step_ms", "lightning_compile", chunked)
    if mem is None or time is None:
        return []
    how = "chunked" if chunked.get("loss_chunked") else f"whole logits: {chunked.get('loss_reason')}"
    return [f"runner_chunked ({how}) step peak {100 * (1 - mem):.0f}% below lightning_compile's (target >= 35%: "
            f"{'met' if mem <= 0.65 else 'missed'}) at {time:.3f}x its step time (target <= 1.02x: "
            f"{'met' if time <= 1.02 else 'missed'})"]


def _describe(quick: bool) -> str:
    s = VOCAB_QUICK if quick else VOCAB
    return (f"Llama-style {s['layers']}x{s['hidden']} (MLP {s['intermediate']}, vocab {s['vocab']:,}, untied output "
            f"layer), seq {s['seq']}, batch {s['batch']}, random tokens, full fine-tune; {s['warmup']} warm-up + "
            f"{s['timed']} timed steps")


COLUMNS: list[Column] = [
    ("step ms", fmt("step_ms", ".1f")), ("tokens/s", fmt("tokens_per_s", ",.0f")),
    ("step peak GiB", fmt("step_peak_gib", ".2f")), ("process peak GiB", fmt("peak_gib", ".2f")),
    ("loss chunks", lambda r, rows: cell(r.get("loss_chunks"), "d")),
    ("graph breaks", fmt("graph_breaks", "d")), ("recompiles", fmt("recompiles", "d")),
    ("peak vs Lightning + compile", lambda r, rows: cell(ratio(rows, "step_peak_gib", "lightning_compile", r), ".2f")),
    ("step vs Lightning + compile", lambda r, rows: cell(ratio(rows, "step_ms", "lightning_compile", r), ".3f")),
]

VOCAB_WORKLOAD = per_contestant("vocab", _describe, CONTESTANTS, 150.0, _jobs, one_job_row, 900, COLUMNS, _targets,
                                first=("lightning", "lightning_compile"))
