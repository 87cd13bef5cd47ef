"""``FSDPCompileStrategy``: FSDP2 (``fully_shard``) with the compile stack, on Lightning's ``ModelParallelStrategy``."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.trainer.states import TrainerFn

from runner import lightning_internals as li
from runner.config.schema import FsdpMixedPrecision
from runner.stack.compiling.blocks import find_blocks
from runner.stack.compiling.compile import compiled_submodules
from runner.stack.compiling.shard import ShardPlan, apply_sharding, is_sharded, resolve_mixed_precision
from runner.strategy.lightning import CompileStrategyBase


class FSDPCompileStrategy(CompileStrategyBase, ModelParallelStrategy):
    """FSDP2 over every process (one data-parallel mesh dimension), with the compile stack applied per
    block before sharding. ``save_distributed_checkpoint=False`` writes full checkpoints instead of
    sharded ones."""

    def __init__(self, *args: Any, reshard_after_forward: bool = True,
                 mixed_precision: FsdpMixedPrecision = FsdpMixedPrecision.auto, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reshard_after_forward = reshard_after_forward
        self.mixed_precision = mixed_precision
        self.fsdp_units = 0
        self.shard_plan: ShardPlan | None = None

    def setup_environment(self) -> None:
        li.set_pure_data_parallel(self)
        super().setup_environment()

    def setup(self, trainer: L.Trainer) -> None:
        # ModelParallelStrategy.setup (lightning/pytorch/strategies/model_parallel.py:166) refuses a
        # LightningModule that does not override configure_model to shard itself. Here the strategy
        # shards, inside the stack's order; nothing is initialised on the meta device, so there is
        # nothing to materialise.
        assert self.model is not None and self.accelerator is not None
        self.accelerator.setup(trainer)
        module = self.lightning_module
        assert module is not None
        if trainer.state.fn == TrainerFn.FITTING and not is_sharded(module):
            side = self.lightning_side(trainer, optimizers=functools.partial(self._place_and_build_optimizers, trainer),
                                      shard=functools.partial(self.shard, precision=trainer.precision))
            self.stack.setup(module, side)
            return
        if not is_sharded(module):
            self.shard(module, trainer.precision)
        self._place_and_build_optimizers(trainer)

    def _place_and_build_optimizers(self, trainer: L.Trainer) -> list[torch.optim.Optimizer]:
        """Precision, device, and (when fitting) the optimizers over the sharded parameters."""
        assert self.model is not None
        self.model = self.precision_plugin.convert_module(self.model)
        self.model_to_device()
        self.barrier()
        if trainer.state.fn == TrainerFn.FITTING:
            self.setup_optimizers(trainer)
        self.setup_precision_plugin()
        return list(self.optimizers)

    def shard(self, module: torch.nn.Module, precision: str) -> None:
        """``fully_shard`` each block (the blocks ``compile=blocks`` compiles), then each top-level child
        holding parameters."""
        module.to(self.root_device)
        blocks = [m for _, m in find_blocks(module, tuple(self.stack.settings.compile.block_types))]
        plan = ShardPlan(mesh=self.device_mesh["data_parallel"], reshard_after_forward=self.reshard_after_forward,
                         mixed_precision=resolve_mixed_precision(self.mixed_precision, precision))
        self.shard_plan = plan
        self.fsdp_units = apply_sharding(blocks, compiled_submodules(module), plan)

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any | None = None) -> None:
        """A sharded checkpoint is a directory written by every rank: write it under a hidden name, then
        swap it in, so a run killed mid-save keeps its previous ``last.ckpt`` whole (what
        ``AtomicCheckpointIO`` does for files; a full checkpoint goes through it)."""
        if not li.saves_distributed_checkpoint(self):
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        path = Path(self.broadcast(str(filepath)))
        tmp, old = path.with_name(f".{path.name}.tmp"), path.with_name(f".{path.name}.old")
        if self.is_global_zero:
            for stale in (tmp, old):
                if stale.exists():
                    shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        self.barrier()
        super().save_checkpoint(checkpoint, tmp, storage_options)
        self.barrier()
        if self.is_global_zero:
            if path.exists():
                os.replace(path, old)  # a directory cannot be renamed over a non-empty one
            os.replace(tmp, path)
            if old.exists():
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        self.barrier()

    def figures(self) -> dict[str, Any]:
        """What the stack and sharding did, for the report."""
        plan = self.shard_plan
        return {
            **self.stack.figures(),
            "fsdp/world_size": self.world_size,
            "fsdp/units": self.fsdp_units,
            "fsdp/reshard_after_forward": self.reshard_after_forward,
            "fsdp/mixed_precision": plan.mixed_precision.value if plan else None,
            "fsdp/distributed_checkpoint": li.saves_distributed_checkpoint(self),
        }
