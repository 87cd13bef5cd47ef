"""A 2-process CPU DDP fit through DDPCompileStrategy, run by tests/test_ddp.py as a real script
(Lightning's launcher re-executes the script for rank 1, so it cannot run inside pytest itself).

Prints one JSON line from rank 0: per-rank parameter checksums, steps and graph counts; and from each
rank at exit whether a process group was left for the interpreter's finalization.
"""

from __future__ import annotations

import atexit
import json
import os
import sys

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from runner.config.schema import CompileConfig, Scope
from runner.strategy import DDPCompileStrategy
from tests.helpers import tiny_data, tiny_module


class Checksums(Callback):
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        flat = torch.cat([p.detach().flatten() for p in pl_module.parameters()])
        local = torch.tensor([flat.sum().item(), flat.abs().sum().item(),
                              float(torch._dynamo.utils.counters["stats"]["unique_graphs"])])
        gathered = trainer.strategy.all_gather(local)
        if trainer.is_global_zero:
            print("RESULT " + json.dumps({"checksums": gathered.tolist(), "steps": trainer.global_step}), flush=True)


def _report_exit() -> None:
    # Registered before the fit, so it runs after the strategy's own exit handler (LIFO).
    line = f"EXIT rank={os.environ.get('LOCAL_RANK', '0')} group_left={torch.distributed.is_initialized()}\n"
    sys.stdout.write(line)  # one write: both ranks share this pipe
    sys.stdout.flush()


def main() -> None:
    atexit.register(_report_exit)
    scope = Scope(sys.argv[1]) if len(sys.argv) > 1 else Scope.step
    strategy = DDPCompileStrategy(compile=CompileConfig(scope=scope, backend="aot_eager"), process_group_backend="gloo")
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=10, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, callbacks=[Checksums()])
    trainer.fit(tiny_module(), tiny_data())


if __name__ == "__main__":
    main()
