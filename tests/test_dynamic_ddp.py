"""2-process CPU DDP (gloo) where the ranks see different sequence lengths: every rank takes the same
dynamic-shape decision and compiles the same number of graphs.

The file is also the script each rank runs (``python -m tests.test_dynamic_ddp POLICY COLLECTIVES``):
Lightning's launcher re-executes it for rank 1, so the fit cannot run inside pytest itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS = 8
# Rank 0 sees one length throughout; rank 1's lengths change at step 2. Without agreement, torch's
# automatic dynamic recompiles on rank 1 only (1 graph vs 2).
LENGTHS = {0: [24] * STEPS, 1: [24, 24, 31, 17, 28, 20, 24, 30]}


def _fit(policy: str, collectives: bool, accelerator: str = "cpu", nodes: int = 1) -> None:
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import Callback
    from torch.utils.data import DataLoader

    from runner.config.schema import CompileConfig, DynamicConfig, OptimizerPolicy, Scope, ShapePolicy
    from runner.strategy import DDPCompileStrategy
    from tests.helpers import tiny_module

    class RankData(L.LightningDataModule):
        def train_dataloader(self) -> DataLoader:
            rank = self.trainer.global_rank if self.trainer is not None else 0
            g = torch.Generator().manual_seed(rank)
            batches = []
            for t in LENGTHS[rank]:
                x = torch.randint(0, 256, (2, t + 1), generator=g)
                batches.append((x[:, :-1].contiguous(), x[:, 1:].contiguous()))
            return DataLoader(batches, batch_size=None, shuffle=False)  # type: ignore[arg-type]

    class Report(Callback):
        def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            s = trainer.strategy.stack.figures()  # type: ignore[attr-defined]
            mine = {"graphs": s["dynamic/graphs"], "agreement": s["dynamic/agreement"],
                    "dims": s.get("dynamic/agreed_dynamic_dims"), "steps": trainer.global_step,
                    "recompiles": s["dynamic/recompiles"], "exchanges": s.get("dynamic/agreement_exchanges"),
                    "held": s.get("dynamic/agreement_held_steps"), "rank": trainer.global_rank,
                    "node": trainer.node_rank}
            gathered: list[Any] = [None] * trainer.world_size
            torch.distributed.all_gather_object(gathered, mine)
            if trainer.is_global_zero:
                print("RESULT " + json.dumps(gathered), flush=True)

    dynamic = DynamicConfig(policy=ShapePolicy(policy), compiler_collectives=collectives)
    compile = CompileConfig(scope=Scope.step, backend="eager", optimizer=OptimizerPolicy.none)
    backend = "gloo" if accelerator == "cpu" else "nccl"
    strategy = DDPCompileStrategy(compile=compile, dynamic=dynamic, process_group_backend=backend)
    trainer = L.Trainer(accelerator=accelerator, devices=2 // nodes, num_nodes=nodes, strategy=strategy,
                        max_steps=STEPS, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, use_distributed_sampler=False, callbacks=[Report()])
    trainer.fit(tiny_module(), RankData())


def _launch(policy: str, collectives: bool, accelerator: str = "cpu") -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tests.test_dynamic_ddp", policy, str(int(collectives)), accelerator]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


@pytest.mark.slow
def test_without_agreement_the_ranks_diverge() -> None:
    """The control: the same run with dynamic.compiler_collectives=false compiles 1 graph on rank 0, 2 on rank 1."""
    rank0, rank1 = _launch("automatic", collectives=False)
    assert rank0["agreement"] == rank1["agreement"] == "local"
    assert (rank0["graphs"], rank1["graphs"]) == (1, 2)



@pytest.mark.gpu
@pytest.mark.slow
def test_accelerators_agree_through_runners_exchange_too() -> None:
    """On NCCL the shapes go over runner's own gloo group (no per-frame guard collectives)."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices (NCCL refuses two ranks on one device)")
    rank0, rank1 = _launch("automatic", collectives=True, accelerator="cuda")
    assert rank0["agreement"] == rank1["agreement"] == "runner"
    assert rank0["graphs"] == rank1["graphs"] == 2, (rank0, rank1)


@pytest.mark.slow
def test_two_nodes_with_different_lengths_compile_the_same_graphs() -> None:
    """Two nodes of one process each, simulated on this machine as a user starts them on two hosts
    (``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK``; ``num_nodes=2``): the ranks see different lengths,
    exchange shapes twice (the first step, the step after rank 1's change), recompile alike (static, then dynamic:
    2 graphs on both, the sequence dim of inputs and targets marked), and finish. Two ranks on one node take the
    same path (the control, test_without_agreement_the_ranks_diverge, runs them there)."""
    from tests.helpers import free_port

    port = free_port()
    procs = []
    for node in (0, 1):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "NODE_RANK": str(node)}
        cmd = [sys.executable, "-m", "tests.test_dynamic_ddp", "automatic", "1", "cpu", "2"]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-3000:] for _, err in outs]
    line = next(ln for ln in outs[0][0].splitlines() if ln.startswith("RESULT "))
    rank0, rank1 = json.loads(line.removeprefix("RESULT "))
    assert (rank0["node"], rank1["node"]) == (0, 1) and rank0["steps"] == rank1["steps"] == STEPS
    assert rank0["agreement"] == rank1["agreement"] == "runner"  # torch's collectives crash on CPU (module doc)
    assert rank0["graphs"] == rank1["graphs"] == 2 and rank0["recompiles"] == rank1["recompiles"] == 1
    assert rank0["dims"] == rank1["dims"] == [[0, 1], [1, 1]]
    assert rank0["exchanges"] == rank1["exchanges"] == 2 and (rank0["held"], rank1["held"]) == (0, 1)


if __name__ == "__main__":
    _fit(sys.argv[1], bool(int(sys.argv[2])), sys.argv[3] if len(sys.argv) > 3 else "cpu",
         int(sys.argv[4]) if len(sys.argv) > 4 else 1)
