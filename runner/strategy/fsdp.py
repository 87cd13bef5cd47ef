"""``FSDPCompileStrategy``: FSDP2 (``fully_shard``) with the compile stack, on Lightning's
``ModelParallelStrategy``.

Lightning's strategy brings the process group, the device mesh, the distributed sampler, and
sharded (``torch.distributed.checkpoint``) or full checkpoints with resume; it leaves sharding and
compiling to the LightningModule's ``configure_model``. runner's modules know nothing about either,
so this strategy applies them, in one order (torchtitan's)::

    shape policy -> saved activations (checkpoint wrappers / hooks) -> compile each block in place
      -> fully_shard each block, then the root -> optimizers on the sharded (DTensor) parameters
      -> optimizer-step policy

Compiling before sharding keeps FSDP's all-gather / reduce-scatter hooks outside the compiled
graphs (they are module hooks, run eagerly around each block): 0 graph breaks in the blocks. On CPU
the process group is gloo (Lightning's default for a CPU device).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.trainer.states import TrainerFn

from runner.config.schema import (
    CompileConfig,
    CudaGraphsConfig,
    DynamicConfig,
    FsdpMixedPrecision,
    OffloadConfig,
)
from runner.stack import CompileStack
from runner.stack.compile import compiled_submodules, find_blocks
from runner.stack.shard import ShardPlan, apply_sharding, is_sharded, resolve_mixed_precision
from runner.strategy.lightning import _CompileHooks, _settings


class FSDPCompileStrategy(_CompileHooks, ModelParallelStrategy):
    """FSDP2 over every process (one data-parallel mesh dimension), with the compile stack applied per
    block before sharding. ``save_distributed_checkpoint=False`` writes full checkpoints instead of
    sharded ones."""

    def __init__(
        self,
        compile: CompileConfig | None = None,
        dynamic: DynamicConfig | None = None,
        offload: OffloadConfig | None = None,
        cudagraphs: CudaGraphsConfig | None = None,
        reshard_after_forward: bool = True,
        mixed_precision: FsdpMixedPrecision = FsdpMixedPrecision.auto,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stack = CompileStack(_settings(compile, dynamic, offload, cudagraphs))
        self.reshard_after_forward = reshard_after_forward
        self.mixed_precision = mixed_precision
        self.fsdp_units = 0

    def setup_environment(self) -> None:
        # Pure FSDP: every process is one data-parallel shard (Lightning's "auto" would make the
        # in-node dimension tensor-parallel, model_parallel.py setup_environment).
        self._data_parallel_size = self.num_nodes * self.num_processes
        self._tensor_parallel_size = 1
        super().setup_environment()

    def setup(self, trainer: L.Trainer) -> None:
        # ModelParallelStrategy.setup (lightning/pytorch/strategies/model_parallel.py:166) refuses a
        # LightningModule that does not override configure_model to shard itself. Here the strategy
        # shards, so this is that method's body without the refusal and with the stack around the
        # sharding; nothing is initialised on the meta device, so there is nothing to materialise.
        assert self.model is not None and self.accelerator is not None
        self.accelerator.setup(trainer)
        module = self.lightning_module
        assert module is not None
        fitting = trainer.state.fn == TrainerFn.FITTING
        if not is_sharded(module):
            if fitting:
                self.stack.prepare_module(module, self.root_device, trainer.accumulate_grad_batches)
            self.shard(module, trainer.precision)
        self.model = self.precision_plugin.convert_module(self.model)
        self.model_to_device()
        self.barrier()
        if fitting:
            self.setup_optimizers(trainer)
        self.setup_precision_plugin()
        if fitting:
            self.stack.prepare_optimizers(module, [*self.optimizers], self.root_device)

    def shard(self, module: torch.nn.Module, precision: str) -> None:
        """``fully_shard`` each block (``compile.block_types``, else the largest ``nn.ModuleList``'s
        children: the blocks ``compile=blocks`` compiles), then each top-level child holding parameters."""
        module.to(self.root_device)
        blocks = find_blocks(module, tuple(self.stack.settings.compile.block_types))
        plan = ShardPlan(mesh=self.device_mesh["data_parallel"], reshard_after_forward=self.reshard_after_forward,
                         mixed_precision=resolve_mixed_precision(self.mixed_precision, precision))
        self.shard_plan = plan
        self.fsdp_units = apply_sharding(blocks, compiled_submodules(module), plan)

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any | None = None) -> None:
        """A sharded checkpoint is a directory written by every rank: write it under a hidden name, then
        swap it in, so a run killed mid-save keeps its previous ``last.ckpt`` whole (what
        ``AtomicCheckpointIO`` does for files; a full checkpoint goes through it)."""
        if not self._save_distributed_checkpoint:
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
        """What sharding did, for the report."""
        plan = getattr(self, "shard_plan", None)
        return {
            "fsdp/world_size": self.world_size,
            "fsdp/units": self.fsdp_units,
            "fsdp/reshard_after_forward": self.reshard_after_forward,
            "fsdp/mixed_precision": plan.mixed_precision.value if plan else None,
            "fsdp/distributed_checkpoint": self._save_distributed_checkpoint,
        }
