"""Every rank takes the same dynamic-shape decision under DDP and FSDP, at the same step."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Any

import torch

from runner.config.schema import ShapePolicy


class Agreement(Enum):
    """How ranks agree on which dims are dynamic."""

    local = "local"  # one process, or a policy with no per-rank decision to make
    runner = "runner"  # ShapeAgreement: a one-integer flag per check, shapes after a change (its own gloo group)


def resolve_agreement(policy: ShapePolicy, world_size: int, enabled: bool = True) -> Agreement:
    """Padded policies present the same shapes everywhere; the others need agreement under several ranks."""
    if not enabled or world_size <= 1 or not policy.row.ranks_agree:
        return Agreement.local
    return Agreement.runner


def world_size() -> int:
    """The default process group's size, 1 without one."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


MAX_CHECK_INTERVAL = 32
Shapes = list[tuple[int, ...]]
Dims = set[tuple[int, int]]


# Ranks agree over a gloo group of runner's own (host memory: no device sync, never queued behind the gradient
# collectives). A dim becomes dynamic on every rank at the same step once any rank saw it at a size other than rank
# 0's first batch, and stays so: what torch's automatic dynamic does on one process, made global. Per step it
# costs one integer: the first step gathers every rank's shapes once; later a rank that sees a size not agreed on
# runs that step eagerly (it cannot recompile alone) and raises its flag, read through an asynchronous
# all_reduce(MAX) at the next check, so no rank waits; only a raised flag makes the ranks exchange shapes. Checks
# come every step at first, then twice as far apart after each quiet one, up to MAX_CHECK_INTERVAL, on a schedule
# every rank computes alike (benchmarks/shape_agreement.py: on average 1/32 of a one-integer all-reduce a step).
# Not torch's compiler collectives (enable_compiler_collectives): they need every rank to compile at the same time,
# so guard collectives too (set_enable_guard_collectives: two all-gathers and a host sync at every entry into every
# compiled frame, per block per step under compile.scope=blocks; on NCCL each a device sync), and on CPU process groups
# they still crash (checked on torch 2.13 and 2.15, two gloo ranks: gloo fails in
# OutputGraph.run_compiler_collective with "TypeError: sequence item 0: expected str instance, torch.device found",
# cpu:gloo with "ZeroDivisionError: integer modulo by zero", torch.accelerator.device_count() being 0).
class ShapeAgreement:
    """Runner's compiler collective: which (tensor, dim) of the batch are dynamic on every rank."""

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.reference: Shapes | None = None
        self.dynamic: Dims = set()
        self.exchanges = 0
        self.checks = 0
        self.held_steps = 0
        self._seen: Dims = set()  # dims this rank saw vary since the last exchange
        self._pending: tuple[Any, torch.Tensor] | None = None  # the flag all-reduce in flight
        self._step = 0
        self._next_check = 1
        self._interval = 1

    def observe(self, shapes: Shapes) -> tuple[Dims, bool]:
        """This step's agreement (a collective: every rank calls it once per step, in step order):
        the (tensor index, dim) pairs dynamic from this step on, the same on every rank, and whether
        this rank must run the step eagerly (it saw a size the ranks have not agreed on yet)."""
        new: Dims = set()
        if self.reference is None or self._flagged():
            self._exchange(shapes)
            self._interval, self._next_check = 1, self._step + 1  # shapes are moving: check every step again
        else:
            new = self.varying(shapes) - self.dynamic
            self._seen |= new
        if self._step >= self._next_check:
            self._start_flag(bool(self._seen))
            self._next_check = self._step + self._interval
            self._interval = min(2 * self._interval, MAX_CHECK_INTERVAL)
        self._step += 1
        if new:
            self.held_steps += 1
        return set(self.dynamic), bool(new)

    def varying(self, shapes: Shapes) -> Dims:
        """The (tensor, dim) pairs of ``shapes`` whose size differs from the reference; a batch of
        another structure than the reference's flags every dim (the exchange then refuses it)."""
        assert self.reference is not None
        if [len(s) for s in shapes] != [len(s) for s in self.reference]:
            return {(i, d) for i, shape in enumerate(shapes) for d in range(len(shape))} | {(-1, -1)}
        return {(i, d) for i, shape in enumerate(shapes) for d, size in enumerate(shape)
                if size != self.reference[i][d]}

    def close(self) -> None:
        """Wait for the flag still in flight (every rank started it: every rank waits), then destroy the
        group (every rank created it; a process that fits again creates a new one)."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None
        if self.group is not None:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group(self.group)
            self.group = None

    def _flagged(self) -> bool:
        """Whether any rank flagged a change at the last check (its all-reduce, waited on now: it was
        started at least one step ago)."""
        if self._pending is None:
            return False
        work, flag = self._pending
        self._pending = None
        work.wait()
        return bool(flag.item())  # a CPU tensor of the gloo group: no device involved

    def _start_flag(self, changed: bool) -> None:
        import torch.distributed as dist

        flag = torch.tensor([int(changed)], dtype=torch.int32)
        self._pending = (dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True), flag)
        self.checks += 1

    def _exchange(self, shapes: Shapes) -> None:
        import torch.distributed as dist

        gathered: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(gathered, (shapes, sorted(self._seen)), group=self.group)
        self.exchanges += 1
        self._seen = set()
        self.decide([g[0] for g in gathered], {tuple(dim) for g in gathered for dim in g[1]})

    def decide(self, all_shapes: Sequence[Shapes], seen: Iterable[tuple[int, int]] = ()) -> Dims:
        """The pure part of an exchange: every rank's shapes for this step and the dims the ranks saw
        vary since the last exchange in, dynamic dims out."""
        seen = set(seen)
        structures = {tuple(len(s) for s in shapes) for shapes in all_shapes}
        if len(structures) > 1 or (-1, -1) in seen:
            raise RuntimeError(f"ranks disagree on the batch structure (tensor ranks per rank: {sorted(structures)}); "
                               "every rank must see batches of the same tensors with the same number of dims.")
        if self.reference is None:
            self.reference = [tuple(s) for s in all_shapes[0]]
        self.dynamic |= seen - {(-1, -1)}
        for shapes in all_shapes:
            self.dynamic |= self.varying(list(shapes))
        return set(self.dynamic)


def shapes_of(tensors: list[torch.Tensor]) -> list[tuple[int, ...]]:
    return [tuple(t.shape) for t in tensors]
