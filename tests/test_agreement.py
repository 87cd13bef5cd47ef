"""``ShapeAgreement`` between two real gloo processes: one integer per step, shapes only when one changed.

Two ranks observe batch shapes step by step; rank 1's length changes at step 2. The rank that sees the
new size runs that step eagerly (it must not recompile alone), raises its flag, and at the next step every
rank reads the flag, exchanges shapes and marks the dim dynamic: the same dims, at the same step, on both
ranks. After that, lengths keep varying and nothing is exchanged again, and the flag is checked less and
less often.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from runner.stack.dynamic.agreement import ShapeAgreement
from tests.helpers import free_port

LENGTHS = {0: [24] * 8, 1: [24, 24, 31, 17, 28, 20, 24, 30]}



def _rank(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    gathers = []
    real = dist.all_gather_object

    def counted(*args: Any, **kwargs: Any) -> None:  # the real collective, counted
        gathers.append(len(log))
        real(*args, **kwargs)

    dist.all_gather_object = counted  # type: ignore[assignment]
    group = dist.new_group(backend="gloo")
    agreement = ShapeAgreement(group)
    log: list[Any] = []
    for n in LENGTHS[rank]:
        dims, hold = agreement.observe([(2, n), (2, n)])
        log.append([sorted(dims), hold])
    agreement.close()
    destroyed = agreement.group is None and group not in dist.distributed_c10d._world.pg_map  # the fit's group
    dist.all_gather_object = real  # type: ignore[assignment]
    Path(out, f"rank{rank}.json").write_text(json.dumps(
        {"log": log, "gathers": gathers, "exchanges": agreement.exchanges, "checks": agreement.checks,
         "held": agreement.held_steps, "destroyed": destroyed}))
    dist.destroy_process_group()


@pytest.mark.slow
def test_ranks_agree_at_the_same_step_and_stop_exchanging(tmp_path: Path) -> None:
    mp.spawn(_rank, args=(free_port(), str(tmp_path)), nprocs=2)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    dynamic = [[0, 1], [1, 1]]  # the sequence dim of inputs and targets
    assert [dims for dims, _ in r0["log"]] == [dims for dims, _ in r1["log"]] == [[]] * 3 + [dynamic] * 5
    assert [hold for _, hold in r1["log"]] == [False, False, True] + [False] * 5  # the new size: eager, once
    assert not any(hold for _, hold in r0["log"])
    # The shapes went over the wire twice (the first step, the step after the change), never after.
    assert r0["gathers"] == r1["gathers"] == [0, 3]
    # Flags are checked at steps 1 and 2 (every step at first), then, after the exchange at 3, at 4, 5 and 7:
    # twice as far apart after each quiet check.
    assert r0["exchanges"] == r1["exchanges"] == 2 and r0["checks"] == r1["checks"] == 5
    assert (r0["held"], r1["held"]) == (0, 1)
    assert r0["destroyed"] and r1["destroyed"]  # closing destroys the group it was given (one per fit)
