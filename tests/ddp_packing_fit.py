"""A 2-process CPU DDP fit on packed instruction rows, run by tests/test_packing_processes.py as a real script
(Lightning's launcher re-executes the script for rank 1). Rank 0 prints one JSON line: per rank, the packs it
trained on (a fingerprint of each batch's rows), their shapes, the graphs its step compiled, its parameters'
checksum, whether it prepared the data, the store it read and how much of the ids' file it shares with the other
rank (``Shared_Clean`` of its mapping, once both have read all of it)."""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from runner.config.schema import CompileConfig, Scope
from runner.data.instruct import InstructDataModule
from runner.models.gpt import GPT
from runner.strategy import DDPCompileStrategy
from runner.training.module import TrainModule


class Seen(Callback):
    def __init__(self) -> None:
        self.rows: list[str] = []
        self.shapes: set[tuple[int, ...]] = set()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        inputs, targets = batch
        self.shapes.add(tuple(inputs.input_ids.shape))
        for row in inputs.input_ids:
            self.rows.append(hashlib.sha1(row.numpy().tobytes()).hexdigest()[:12])

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        flat = torch.cat([p.detach().flatten() for p in pl_module.parameters()])
        part = trainer.datamodule._parts[0]  # type: ignore[attr-defined]
        ids = part.store.ragged("ids").values
        int(np.asarray(ids.array).sum())  # every page of the ids read, on both ranks, before either looks
        torch.distributed.barrier()
        mine = {"rows": self.rows, "shapes": sorted(self.shapes), "checksum": float(flat.sum()),
                "graphs": int(torch._dynamo.utils.counters["stats"]["unique_graphs"]), "prepared": part.built,
                "store": str(part.store.directory), "shared_kb": _shared_kb(ids.path)}
        gathered: list[Any] = [None, None]
        torch.distributed.all_gather_object(gathered, mine)
        if trainer.is_global_zero:
            print("RESULT " + json.dumps({"ranks": gathered, "steps": trainer.global_step}), flush=True)


def _shared_kb(path: Path) -> int:
    """Kilobytes of this process's mapping of ``path`` that another process maps too (``/proc/self/smaps``)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.endswith(str(path)):
            for detail in lines[i + 1:i + 25]:
                if detail.startswith("Shared_Clean:"):
                    return int(detail.split()[1])
    return 0


def main() -> None:
    torch.manual_seed(0)
    module = TrainModule(GPT(n_layer=1, n_head=2, n_embd=32, block_size=128),
                         optimizer=partial(torch.optim.AdamW, lr=1e-3))
    # Examples that differ from each other (so that two packs never hold the same ids), of varied lengths. Both
    # ranks write the same file: it is named after its content.
    rows = "".join(json.dumps({"prompt": f"question {i}", "response": f"answer {i} " + "x" * (i * 7 % 40)}) + "\n"
                   for i in range(300))
    path = Path(tempfile.gettempdir()) / f"runner-ddp-packing-{hashlib.sha1(rows.encode()).hexdigest()[:12]}.jsonl"
    if not path.exists():
        path.write_text(rows)
    data = InstructDataModule(str(path), seq_len=128, batch_size=2, packing=True)
    strategy = DDPCompileStrategy(compile=CompileConfig(scope=Scope(sys.argv[1] if len(sys.argv) > 1 else "step"),
                                                        backend="aot_eager"), process_group_backend="gloo")
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=12, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, callbacks=[Seen()])
    trainer.fit(module, data)


if __name__ == "__main__":
    main()
