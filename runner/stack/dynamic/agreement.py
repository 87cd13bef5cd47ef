"""Every rank takes the same dynamic-shape decision under DDP and FSDP.

runner agrees by itself, on every backend: ``ShapeAgreement`` all-gathers the shape of every batch
tensor each training step over a gloo group of its own (host memory only: no device sync, never queued
behind the gradient collectives); a dim becomes dynamic on every rank at the first step where any rank
sees it at a size other than the first step's, and stays dynamic. The dim is marked
(``maybe_mark_dynamic``) on every rank from that step on, and a mark fails the static graph's guards, so
all ranks recompile together into the same dynamic graph: what torch's automatic dynamic does on one
process, made global. One small host exchange per step, whatever is compiled.

Not torch's compiler collectives (``torch._dynamo.config.enable_compiler_collectives``): they need every
rank to compile at the same time, so they need guard collectives too (``set_enable_guard_collectives``:
``all_gather_object`` of each guard result, i.e. two all-gathers and a host sync, at every entry into
every compiled frame: per block per step under ``compile.scope=blocks``, and the optimizer step's frames
too: on NCCL each one a device sync). In torch 2.13 they also crash on CPU process groups: a ``gloo``
group reports two device types (cuda and cpu), so the single-device-type assertion in
``OutputGraph.run_compiler_collective`` fails; a ``cpu:gloo`` group passes it and then divides by
``torch.accelerator.device_count()`` == 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

import torch

from runner.config.schema import ShapePolicy


class Agreement(Enum):
    """How ranks agree on which dims are dynamic."""

    local = "local"  # one process, or a policy with no per-rank decision to make
    runner = "runner"  # ShapeAgreement: all-gather of batch shapes each step (a gloo group of its own)


def resolve_agreement(policy: ShapePolicy, world_size: int, enabled: bool = True) -> Agreement:
    """Padded policies present the same shapes everywhere; the others need agreement under several ranks."""
    if not enabled or world_size <= 1 or policy in (ShapePolicy.static, ShapePolicy.bucket):
        return Agreement.local
    return Agreement.runner


def process_group_info() -> tuple[int, str | None]:
    """``(world_size, backend)`` of the default process group, ``(1, None)`` without one."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 1, None
    return dist.get_world_size(), str(dist.get_backend())


class ShapeAgreement:
    """Runner's compiler collective: which (tensor, dim) of the batch are dynamic on every rank."""

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.reference: list[tuple[int, ...]] | None = None
        self.dynamic: set[tuple[int, int]] = set()
        self.exchanges = 0

    def observe(self, shapes: list[tuple[int, ...]]) -> set[tuple[int, int]]:
        """Exchange this step's shapes (a collective: every rank calls it once per step) and return
        the (tensor index, dim) pairs that are dynamic from this step on, the same on every rank."""
        import torch.distributed as dist

        gathered: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(gathered, shapes, group=self.group)
        self.exchanges += 1
        return self.decide(gathered)

    def decide(self, all_shapes: Sequence[Sequence[tuple[int, ...]]]) -> set[tuple[int, int]]:
        """The pure part of ``observe``: every rank's shapes for this step in, dynamic dims out."""
        structures = {tuple(len(s) for s in shapes) for shapes in all_shapes}
        if len(structures) > 1:
            raise RuntimeError(f"ranks disagree on the batch structure (tensor ranks per rank: {sorted(structures)}); "
                               "every rank must see batches of the same tensors with the same number of dims.")
        if self.reference is None:
            self.reference = [tuple(s) for s in all_shapes[0]]
        for shapes in all_shapes:
            for i, shape in enumerate(shapes):
                for d, size in enumerate(shape):
                    if size != self.reference[i][d]:
                        self.dynamic.add((i, d))
        return set(self.dynamic)


def shapes_of(tensors: list[torch.Tensor]) -> list[tuple[int, ...]]:
    return [tuple(t.shape) for t in tensors]
