"""FSDP2 sharding (``torch.distributed.fsdp.fully_shard``), applied after the compile step."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from runner.config.schema import FsdpMixedPrecision


@dataclass(frozen=True)
class ShardPlan:
    """How the model is sharded: the mesh, resharding after forward, and the dtypes."""

    mesh: DeviceMesh
    reshard_after_forward: bool = True
    mixed_precision: FsdpMixedPrecision = FsdpMixedPrecision.none


def resolve_mixed_precision(setting: FsdpMixedPrecision, precision: str) -> FsdpMixedPrecision:
    """``auto`` follows the trainer's precision: bf16-mixed gathers parameters in bf16."""
    if setting is not FsdpMixedPrecision.auto:
        return setting
    return FsdpMixedPrecision.bf16 if precision == "bf16-mixed" else FsdpMixedPrecision.none


def is_sharded(module: nn.Module) -> bool:
    """Whether ``fully_shard`` was already applied to ``module`` or one of its submodules."""
    return any(isinstance(m, FSDPModule) for m in module.modules())


def apply_sharding(blocks: list[nn.Module], roots: list[nn.Module], plan: ShardPlan) -> int:
    """``fully_shard`` each block, then each root (the parameters left outside the blocks). Returns
    how many FSDP units were made."""
    # FSDP2 bf16: parameters gathered in bf16, gradients reduced in fp32 (shards and optimizer state stay fp32).
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if plan.mixed_precision is FsdpMixedPrecision.bf16 else MixedPrecisionPolicy())
    for block in blocks:
        fully_shard(block, mesh=plan.mesh, reshard_after_forward=plan.reshard_after_forward, mp_policy=policy)
    for root in roots:
        # The root's parameters are gathered again at the start of backward anyway (torchtitan's choice).
        fully_shard(root, mesh=plan.mesh, reshard_after_forward=False, mp_policy=policy)
    return len(blocks) + len(roots)
