"""Recompute instead of save: activation checkpointing per block, or the compiler's memory budget.

Per-block checkpointing uses torch's own ``checkpoint_wrapper`` (non-reentrant
``torch.utils.checkpoint``), as torchtitan and torchtune do: each block saves only its input and
recomputes its internals in backward. Non-reentrant checkpointing composes with torch.compile
(Dynamo traces it as a higher-order op, no graph break) and with saved-tensor hooks.

The wrapper inserts ``_checkpoint_wrapped_module`` into parameter names; its state-dict hooks strip
it again, so checkpoints stay loadable into an unwrapped model.

The memory budget (``torch._functorch.config.activation_memory_budget``) instead lets the min-cut
partitioner choose what to recompute in each compiled graph so that saved activations fit in a
fraction of the default. It acts on graphs AOTAutograd partitions (measured on torch 2.13: Inductor
and ``aot_eager`` both honour it; 0.0 recomputes everything); eager code ignores it. Dynamo does not
guard on it: set it before the first compile (``configure``), or compiled graphs keep the old one.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    CheckpointWrapper,
    checkpoint_wrapper,
)

from runner.stack.offload import policy


def apply_checkpointing(
    model: nn.Module, block_types: Iterable[str] = (), exclude: frozenset[str] = frozenset()
) -> list[str]:
    """Wrap each repeated block of ``model`` in a non-reentrant checkpoint, in place.

    Blocks are chosen by ``runner.stack.compiling.blocks.find_blocks`` (the rule compiling and sharding use).
    Excluded blocks (names in ``exclude``) keep their activations. Returns the
    names of the wrapped blocks; wrapping twice is a no-op.
    """
    wrapped: list[str] = []
    for name, block in policy.find_blocks(model, block_types):
        if policy.clean_name(name) in exclude or isinstance(block, CheckpointWrapper):
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        # preserve_rng_state keeps dropout masks identical between forward and recompute.
        setattr(parent, child, checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT))
        wrapped.append(name)
    return wrapped
