"""A 2-process CPU FSDP2 fit through FSDPCompileStrategy, run by tests/test_fsdp.py as a real script
(Lightning's launcher re-executes the script for rank 1, so it cannot run inside pytest itself).

``python -m tests.fsdp_fit BACKEND OUT_DIR [STEPS] [RESUME] [--offload=bf16|fp8|checkpoint] [--chunked]``: trains the
tiny GPT
with ``compile=blocks`` on 2 gloo ranks, writes a sharded checkpoint every 4 steps and
``consolidated.pt`` at the end. Rank 0 then trains the same model in this process, without sharding
or compiling, on the same global batches (both ranks' batches, concatenated), with the same
optimizer, schedule, clipping and saved-activation strategy (the same hooks, run eagerly), and
prints one JSON line comparing the two. With ``--offload``, it also trains without the hooks, to show
that the hooks changed something. With ``--chunked``, the FSDP2 fit's loss is chunked (``loss.chunked=true``, 4
chunks: the output layer's weight, tied to the embedding, gathered in the root unit) and the reference's is the whole
logits'.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from runner.config.schema import CompileConfig, OffloadConfig, OffloadStrategy, Scope
from runner.stack.offload import build_offload
from runner.strategy import ConsolidatedCheckpoint, FSDPCompileStrategy
from runner.training.module import TrainModule, lm_loss
from tests.helpers import tiny_data, tiny_module

CLIP = 1.0


class Record(Callback):
    """Each step's batch and loss on this rank; at the end, this rank's compile counters."""

    def __init__(self) -> None:
        self.batches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.losses: list[float] = []
        self.compile: dict[str, Any] = {}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.batches.append((batch[0].clone(), batch[1].clone()))
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        counters = torch._dynamo.utils.counters
        block = pl_module.model.blocks[0]  # type: ignore[union-attr, index]
        offload = trainer.strategy.stack.figures()  # type: ignore[attr-defined]
        self.compile = {
            "offload_path": offload.get("offload/path"),
            "offload_packed": offload.get("offload/eager_packed", 0) + offload.get("offload/traced_packed", 0),
            "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "recompiles": counters["recompiles"].get("total", 0) if "recompiles" in counters else 0,
            "param_type": type(next(pl_module.parameters())).__name__,
            "block_compiled": "forward" in vars(block),  # compiled in place (runner.stack.compiling.compile)
            "block_layers": layers(block),
            "optimizer": trainer.strategy.stack.figures()["compile/optimizer"],  # type: ignore[attr-defined]
            "optimizer_reason": trainer.strategy.stack.figures()["compile/optimizer_reason"],  # type: ignore[attr-defined]
        }


def layers(block: torch.nn.Module) -> list[str]:
    """What was applied to a block, outermost first: FSDP2's unit (its hooks run around the call),
    the in-place compile (of the call), the checkpoint wrapper, the user's block."""
    from torch.distributed.fsdp import FSDPModule

    out = ["fully_shard"] if isinstance(block, FSDPModule) else []
    out += ["compile"] if "forward" in vars(block) else []  # compiled in place (runner.stack.compiling.compile)
    inner = getattr(block, "_checkpoint_wrapped_module", None)
    if inner is not None:
        out.append("checkpoint")
        block = inner
    return [*out, type(block).__name__]


def reference(batches: list[tuple[torch.Tensor, torch.Tensor]],
              offload: OffloadConfig) -> tuple[list[float], TrainModule]:
    """Single process, no sharding, no compiling: the same model, optimizer, schedule, clipping and
    saved-activation hooks."""
    module = tiny_module()
    hooks = build_offload(offload, torch.device("cpu"))
    hooks.apply(module)
    config = module.configure_optimizers()
    opt, sched = config["optimizer"], config["lr_scheduler"]["scheduler"]
    losses = []
    for x, y in batches:
        hooks.prepare_batch((x, y))
        with hooks.step_context():
            loss = lm_loss(module.model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), CLIP)
        opt.step()
        opt.zero_grad()
        sched.step()
        losses.append(loss.item())
    return losses, module


def chunked_module() -> TrainModule:
    """``tiny_module`` with the chunked loss: 4 chunks of a step's 128 positions (a rank's 4 rows of 32)."""
    from runner.config.schema.loss import LossConfig
    from runner.config.schema.peft import PeftConfig
    from runner.training.loss import resolve_loss

    module = tiny_module()
    plan = resolve_loss(module.model, LossConfig(chunked=True, chunks=4), PeftConfig(),
                        {"batch_size": 4, "seq_len": 32}, None)
    return TrainModule(module.model, optimizer=module.optimizer_factory, scheduler=module.scheduler_factory,
                       loss=plan)


def main() -> None:
    chunked = "--chunked" in sys.argv[1:]
    flags = [a for a in sys.argv[1:] if a.startswith("--offload=") or a == "--chunked"]
    args = [a for a in sys.argv[1:] if a not in flags]
    backend, out = args[0], Path(args[1])
    steps = int(args[2]) if len(args) > 2 else 8
    resume = args[3] if len(args) > 3 else None
    offloads = [f for f in flags if f.startswith("--offload=")]
    kind = OffloadStrategy(offloads[0].split("=", 1)[1]) if offloads else OffloadStrategy.none
    # min_bytes=0: a rank holds half the global batch, so a size threshold would pack different
    # tensors here than in the single-process reference.
    offload = OffloadConfig(strategy=kind, min_bytes=0, measure=False)
    strategy = FSDPCompileStrategy(compile=CompileConfig(scope=Scope.blocks, backend=backend), offload=offload,
                                   process_group_backend="gloo")
    record = Record()
    callbacks = [record, ConsolidatedCheckpoint(out / "consolidated.pt"),
                 ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=4, save_top_k=-1, filename="{step}")]
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=steps, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        gradient_clip_val=CLIP, callbacks=callbacks)
    trainer.fit(chunked_module() if chunked else tiny_module(), tiny_data(), ckpt_path=resume)
    gathered: list[Any] = [None, None]
    dist.all_gather_object(gathered, (record.batches, record.losses, record.compile))
    if not trainer.is_global_zero:
        return
    (b0, l0, c0), (b1, l1, c1) = gathered
    global_batches = [(torch.cat([x0, x1]), torch.cat([y0, y1])) for (x0, y0), (x1, y1) in zip(b0, b1, strict=True)]
    fsdp_losses = [(a + b) / 2 for a, b in zip(l0, l1, strict=True)]  # equal shards: mean = global loss
    result: dict[str, Any] = {"steps": trainer.global_step, "fsdp_losses": fsdp_losses, "compile": [c0, c1],
                              "chunked": bool(getattr(trainer.lightning_module, "loss_fn", None).chunked),  # type: ignore[union-attr]
                              "checkpoints": sorted(p.name for p in (out / "ckpt").iterdir())}
    if resume is None:
        ref_losses, ref = reference(global_batches, offload)
        if kind is not OffloadStrategy.none:
            result["no_offload_losses"] = reference(global_batches, OffloadConfig())[0]
        eager = tiny_module(seed=1)  # different weights: the load must overwrite every one of them
        state = torch.load(out / "consolidated.pt", map_location="cpu", weights_only=True)
        eager.load_state_dict(state, strict=True)
        ref_state = ref.state_dict()
        result.update(
            reference_losses=ref_losses,
            consolidated_keys=sorted(state),
            consolidated_types=sorted({type(v).__name__ for v in state.values()}),
            consolidated_vs_reference=max((eager.state_dict()[k] - ref_state[k]).abs().max().item() for k in ref_state),
        )
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
