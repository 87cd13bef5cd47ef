"""Typed schema of ``trainer.distributed`` and ``trainer.fsdp`` (FSDP2), re-exported by ``runner.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Distributed(Enum):
    """How several processes share the training."""

    auto = "auto"  # one device: single process; several devices or nodes: ddp
    ddp = "ddp"  # every rank holds the whole model, gradients and optimizer state
    fsdp = "fsdp"  # FSDP2: parameters, gradients and optimizer state sharded across ranks, per block


class FsdpMixedPrecision(Enum):
    """FSDP2's parameter/reduction dtypes (``MixedPrecisionPolicy``)."""

    auto = "auto"  # from trainer.precision: bf16-mixed gathers parameters in bf16, reduces gradients in fp32
    none = "none"  # parameters gathered and gradients reduced in their own dtype
    bf16 = "bf16"  # parameters gathered in bf16, gradients reduced in fp32


@dataclass
class FsdpConfig:
    """``trainer.fsdp``: FSDP2 settings, used when ``trainer.distributed=fsdp``."""

    # Free each block's gathered parameters after its forward (gathered again in backward): less memory, one more all-
    # gather per block; false keeps them until backward (DDP-like memory for the parameters, fewer collectives).
    reshard_after_forward: bool = True
    mixed_precision: FsdpMixedPrecision = FsdpMixedPrecision.auto  # Dtype of gathered parameters and reduced gradients.
    # Checkpoints while training are sharded (a directory, one file per rank, torch.distributed.checkpoint); false
    # gathers the full state on rank 0 into one file.
    distributed_checkpoint: bool = True
    # At the end of fit, write checkpoints/consolidated.pt: one plain state dict (no DTensor, no _orig_mod.) that loads
    # strictly into an eager model.
    consolidate: bool = True
