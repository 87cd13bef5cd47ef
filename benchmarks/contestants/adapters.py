"""The contestants of ``lora_qlora.py`` (CPU) and of ``gpu.py``'s ``lora`` workload: one Llama-style model fine-tuned
with LoRA the ways users do it, and in full.

- ``lightning``: eager Lightning, every weight trained (the baseline every ratio starts from);
- ``lightning_peft``: Lightning + HF peft's ``get_peft_model`` (eager);
- ``lightning_peft_compile``: the same + ``torch.compile(module)`` + fused AdamW (peft's documented compile path);
- ``runner_full``: runner's ``CompileStrategy`` (compile.scope=step, optimizer=auto), every weight trained;
- ``runner_lora``: the same with ``peft=lora`` (``runner.peft.apply_peft``);
- ``runner_qlora``: ``peft=qlora`` (the frozen base of each adapted linear in NF4).

Every adapter is the same: rank 16 (``--rank``), alpha twice the rank, no dropout, on every linear of attention and
MLP. Each contestant
leaves in ``c.extra["measured"]`` what ``lora_qlora.py`` reports beside its step time: graph breaks, recompiles, peak
memory, the optimizer's state and the trainable parameters.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from contestants.compare import Contestant, Pacer, PeerModule, _adamw, _fit
from contestants.workload import Workload
from runner.config.schema import Background, CompileConfig, OptimizerPolicy, Scope
from runner.config.schema.peft import PeftConfig, PeftMethod
from runner.peft import apply_peft, optimizer_state_bytes
from runner.strategy import CompileStrategy
from runner.torch_internals import observation
from runner.training.module import TrainModule

RANK = 16
"""The adapter's rank by default (runner's peft.r); alpha is twice the rank (runner's and peft's usual 32 at 16)."""
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class Size:
    """A Llama-style model and its batches."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    seq: int
    batch: int
    vocab: int = 256

    def overrides(self) -> dict[str, Any]:
        return {"hidden_size": self.hidden, "intermediate_size": self.intermediate, "num_hidden_layers": self.layers,
                "num_attention_heads": self.heads, "num_key_value_heads": self.heads, "vocab_size": self.vocab,
                "max_position_embeddings": self.seq}

    def describe(self, rank: int = RANK) -> str:
        return (f"Llama-style {self.layers}x{self.hidden} (MLP {self.intermediate}, {self.heads} heads, vocab "
                f"{self.vocab}), seq {self.seq}, batch {self.batch}; adapter r={rank}, alpha={2 * rank} on every "
                "attention and MLP linear")


# Matmuls dominate on the CPU: 2 layers of 1024 (25.7M parameters in the layers, Llama's MLP ratio), 1024 tokens a
# step; the width of the GPU workload's model. Every linear holds whole NF4 blocks (1024 x 2816 = 45,056 of 64).
CPU = Size(hidden=1024, intermediate=2816, layers=2, heads=16, seq=256, batch=4)
CPU_QUICK = Size(hidden=64, intermediate=128, layers=1, heads=2, seq=32, batch=2)


def llama_workload(size: Size, max_bytes: int) -> Workload:
    """The model on packed windows of the stdlib source (the same batches for every contestant)."""
    from runner.data.text import TextDataModule

    dm = TextDataModule(seq_len=size.seq, batch_size=size.batch, max_bytes=max_bytes)
    dm.setup("fit")
    return Workload("llama_peft", size.describe(), partial(causal_lm, size), dm.train_dataloader().dataset,
                    size.batch)


def causal_lm(size: Size) -> nn.Module:
    from runner.models.hf import CausalLM

    return CausalLM(config="llama", overrides=size.overrides())


def hf_peft(model: nn.Module, rank: int = RANK) -> nn.Module:
    """``model`` (runner's ``CausalLM``) with its transformers model wrapped by HF peft's ``get_peft_model``."""
    import peft

    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=TARGETS,
                             task_type="CAUSAL_LM")
    model.model = peft.get_peft_model(model.model, config)  # type: ignore[assignment]
    return model


def runner_peft(model: nn.Module, method: PeftMethod, rank: int = RANK) -> nn.Module:
    apply_peft(model, PeftConfig(method=method, r=rank, alpha=2 * rank))
    return model


def measured(module: nn.Module, optimizers: list[torch.optim.Optimizer], before: dict[str, Any]) -> dict[str, Any]:
    """What compiling did in this process since ``before`` (a counters snapshot), and what training held."""
    after = observation.counters_snapshot()
    records = [observation.to_record(m) for m in observation.compilation_metrics()]
    breaks = sum(observation.graph_break_counts(after).values()) - sum(observation.graph_break_counts(before).values())
    peak = (torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available()
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)  # Linux: KiB
    return {"graph_breaks": breaks, "recompiles": sum(1 for r in records if r.is_forward and r.recompile_reason),
            "graphs": observation.counter(after, "unique_graphs") - observation.counter(before, "unique_graphs"),
            "peak_gib": round(peak, 3), "optimizer_state_bytes": optimizer_state_bytes(optimizers),
            "trainable_params": sum(p.numel() for p in module.parameters() if p.requires_grad)}


def run_lightning(c: Contestant, work: Workload, steps: int, pacer: Pacer) -> None:
    """Eager Lightning, every weight trained; ``hf_peft``: the model wrapped by HF peft first; ``compile``:
    ``torch.compile(module)`` and fused AdamW."""
    observation.keep_compilation_metrics(10_000)
    model = work.model(seed=0)
    if c.extra.get("hf_peft"):
        model = hf_peft(model, c.extra.get("rank", RANK))
    module = PeerModule(model, optimizer=_adamw(**({"fused": True} if c.extra.get("compile") else {})))
    c.model = module.model
    before = observation.counters_snapshot()
    fitted: Any = torch.compile(module, backend=c.extra["backend"]) if c.extra.get("compile") else module
    _fit(fitted, work, steps, pacer, precision=c.extra.get("precision", "32-true"))
    c.extra["measured"] = measured(module, module.trainer.optimizers, before)


def run_runner(c: Contestant, work: Workload, steps: int, pacer: Pacer) -> None:
    """runner's ``CompileStrategy`` (scope=step, optimizer=auto) over the model, adapted as ``c.extra["peft"]``."""
    observation.keep_compilation_metrics(10_000)
    model = work.model(seed=0)
    method = c.extra.get("peft", PeftMethod.none)
    if method is not PeftMethod.none:
        model = runner_peft(model, method, c.extra.get("rank", RANK))
    module = TrainModule(model, optimizer=_adamw())
    c.model = module.model
    cfg = CompileConfig(scope=Scope.step, backend=c.extra["backend"], optimizer=OptimizerPolicy.auto,
                        background=Background.disabled)
    before = observation.counters_snapshot()
    _fit(module, work, steps, pacer, strategy=CompileStrategy(compile=cfg, device="cpu"),
         precision=c.extra.get("precision", "32-true"))
    c.extra["measured"] = measured(module, module.trainer.optimizers, before)


def peft_contestants(backend: str, rank: int = RANK) -> list[Contestant]:
    """The field, eager Lightning first (the baseline); every adapter of rank ``rank``, alpha ``2 * rank``."""
    base = {"backend": backend, "rank": rank}
    return [
        Contestant("lightning", "Lightning eager, full fine-tune", run_lightning, dict(base)),
        Contestant("lightning_peft", "Lightning + HF peft, eager", run_lightning, {**base, "hf_peft": True}),
        Contestant("lightning_peft_compile", "Lightning + HF peft + torch.compile(module) + fused AdamW",
                   run_lightning, {**base, "hf_peft": True, "compile": True}),
        Contestant("runner_full", "runner, full fine-tune", run_runner, dict(base)),
        Contestant("runner_lora", "runner peft=lora", run_runner, {**base, "peft": PeftMethod.lora}),
        Contestant("runner_qlora", "runner peft=qlora", run_runner, {**base, "peft": PeftMethod.qlora}),
    ]
