"""Whether anything of the graph-safe optimizer step would be left out of its CUDA graph, asked on the CPU.

The step is captured whole by ``torch.cuda.graph`` (no Inductor partitioning: ``tests/test_cudagraph_partitions.py``
asks Inductor's ``should_partition`` for the compiled training step, which this function never goes through). What
a capture cannot hold is an op torch itself tags as unsafe for CUDA graphs: a host read of a device value
(``data_dependent_output``: ``.item()``, ``bool(tensor)``), an output whose size depends on data
(``dynamic_output_shape``: ``nonzero``), or an op tagged ``cudagraph_unsafe``. Every op the step dispatches is
recorded on the CPU, through the same function the GPU captures, and checked against those tags.

Then the capture's bookkeeping (warm-ups, one capture, replays, capturing again when a constant changes or a
gradient is replaced, giving up after ``MAX_RECORDINGS``), the code a GPU runs around ``torch.cuda.graph``, driven
on the CPU through its one seam (``CapturedStep.capturer``) by a stand-in that keeps the function instead of
recording it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from runner.config.schema import OptimizerPolicy
from runner.stack.optimizer.graphed import MAX_RECORDINGS, WARMUP_CALLS, Clipping
from runner.stack.optimizer.step import OptimizerStep
from tests.test_graphed_optimizer import CLIP, STEPS, STEPS_TOL, _batches, _eager_reference, _model, _optimizer

CPU = torch.device("cpu")
UNSAFE = (torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape, torch.Tag.cudagraph_unsafe)
"""torch's own tags for what a CUDA graph cannot capture or replay."""


class OpsSeen(TorchDispatchMode):
    """Every aten op dispatched while it is on."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[torch._ops.OpOverload] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(func)
        return func(*args, **(kwargs or {}))

    @property
    def names(self) -> set[str]:
        return {op.name() for op in self.ops}

    def left_out(self) -> list[str]:
        """The ops a CUDA graph could not hold, each with torch's tag for why."""
        return [f"{op.name()} ({tag.name})" for op in self.ops for tag in UNSAFE if tag in op.tags]


MakeOptimizer = Callable[[list[nn.Parameter]], torch.optim.Optimizer]


def _step(make: MakeOptimizer, clipping: Clipping) -> tuple[nn.Module, Callable[[], None]]:
    """A small model whose optimizer runs as the graph-safe step, its state created by one first call (as the
    warm-up before a capture does); the step is the function a capture records."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = make(list(model.parameters()))
    step = OptimizerStep(OptimizerPolicy.graphed, "test", {}, clipping=clipping, capture=False)
    step.prepare(opt, CPU)
    graph_safe = step.graphed[0].step
    graph_safe.skip_on_device(limit=4)

    def backward(nan: bool = False) -> None:
        x = torch.randn(4, 8) * (float("nan") if nan else 1.0)
        nn.functional.mse_loss(model(x), torch.randn(4, 1)).backward()

    backward()
    graph_safe.bind()
    graph_safe()  # the warm-up call: the optimizer's state is made here, before any capture

    def run() -> None:
        backward()
        graph_safe()
        backward(nan=True)  # a skipped step runs the same ops: nothing branches on the flag
        graph_safe()

    return model, run


OPTIMIZERS: dict[str, tuple[MakeOptimizer, str]] = {
    "AdamW": (lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.1), "_fused_adamw_"),
    "Adam": (lambda ps: torch.optim.Adam(ps, lr=1e-3), "_fused_adam_"),
    "SGD": (lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9), "_fused_sgd_"),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("clipping", [Clipping(1.0), Clipping(0.1, "value"), Clipping()],
                         ids=["norm", "value", "none"])
def test_nothing_of_the_graph_safe_step_would_be_left_out_of_its_cuda_graph(name: str, clipping: Clipping) -> None:
    make, update = OPTIMIZERS[name]
    _, run = _step(make, clipping)
    seen = OpsSeen()
    with seen:
        run()
    assert seen.left_out() == []
    names = {n.split("::")[-1].split(".")[0] for n in seen.names}
    assert update in names and "_foreach_zero_" in names  # the update and the zeroing are in it
    assert ("linalg_vector_norm" in names or "_foreach_norm" in names)  # the total norm the skip reads
    if clipping.by_value:
        assert {"_foreach_clamp_min_", "_foreach_clamp_max_"} & names or "clamp_" in names


def test_the_check_sees_a_host_read() -> None:
    """What the graph-safe step avoids, and the check above would catch: clipping that reads its norm back to
    the host (``error_if_nonfinite``), and the host-side skip that reads the loss (today's non-finite guard)."""
    model, _ = _step(OPTIMIZERS["AdamW"][0], Clipping())
    nn.functional.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1)).backward()
    seen = OpsSeen()
    with seen:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    assert any("_local_scalar_dense" in op for op in seen.left_out())
    with seen:
        bool(torch.isfinite(torch.tensor(1.0)))
    assert any("data_dependent_output" in op for op in seen.left_out())


# -- the capture's bookkeeping, driven on the CPU through its seam ------------------------------------------------
class Rehearsal:
    """Stands in for ``CudaGraphCapture`` on the CPU: a warm-up runs the function, a "capture" keeps it (and, like a
    real capture, runs nothing), its "replay" runs it again. Everything around it is the code a GPU runs."""

    def __init__(self) -> None:
        self.warmups = 0
        self.captures = 0

    def warm_up(self, fn: Callable[[], None]) -> None:
        self.warmups += 1
        fn()

    def capture(self, fn: Callable[[], None]) -> Callable[[], None]:
        self.captures += 1
        return fn


def test_captured_once_replayed_after_and_equal_to_eager() -> None:
    """Warmed up twice, captured on the third call, replayed every call after: the same 50 steps as
    ``test_graph_safe_step_equals_eager_over_50_steps...`` give the same weights as eager."""
    rehearsal = Rehearsal()
    model, step = _captured(_model(), rehearsal)
    reference, _ = _eager_reference(_model())
    torch.testing.assert_close(list(model.parameters()), list(reference.parameters()), **STEPS_TOL.kwargs)
    assert (rehearsal.warmups, rehearsal.captures) == (WARMUP_CALLS, 1)
    figures = step.figures()
    assert figures["cudagraphs/optimizer_recordings"] == 1
    assert figures["cudagraphs/optimizer_replays"] == STEPS - WARMUP_CALLS
    assert figures["cudagraphs/optimizer_uncaptured"] == WARMUP_CALLS
    assert "(clipped by norm at 0.5; 1 recorded, 48 replayed)" in step.describe()


def _captured(model: nn.Module, capturer: Rehearsal,
              between: Callable[[int, torch.optim.Optimizer], None] | None = None) -> tuple[nn.Module, OptimizerStep]:
    """The 50 steps of test_graphed_optimizer's parity test, captured through ``capturer``; ``between(i, opt)``
    after each step."""
    opt, sched = _optimizer(model)
    step = OptimizerStep(OptimizerPolicy.graphed, "test", {}, clipping=Clipping(CLIP), capture=True, capturer=capturer)
    step.prepare(opt, CPU)
    step.graphed[0].step.skip_on_device(limit=4)
    assert all(group["capturable"] for group in opt.param_groups)  # torch's check before a capture
    for i, (x, y) in enumerate(_batches()):
        opt.step(lambda x=x, y=y: nn.functional.mse_loss(model(x), y).backward())
        sched.step()
        if between is not None:
            between(i, opt)
    return model, step


def test_a_changed_constant_captures_again_and_too_many_stop_capturing() -> None:
    """The fused kernel takes weight decay as a constant: each change drops the captured graph, warms up and
    captures again; after ``MAX_RECORDINGS`` captures the step runs uncaptured, and the report says why."""
    def decay_every_tenth(i: int, opt: torch.optim.Optimizer) -> None:
        if i % 10 == 9:
            for group in opt.param_groups:
                group["weight_decay"] *= 0.5

    rehearsal = Rehearsal()
    model, step = _captured(_model(), rehearsal, decay_every_tenth)
    assert rehearsal.captures == MAX_RECORDINGS
    graphed = step.graphed[0]
    assert graphed.stopped is not None and "weight decay" in graphed.stopped
    assert f"uncaptured after {MAX_RECORDINGS} captures" in step.figures()["compile/optimizer_reason"]
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_replaced_gradient_is_captured_again() -> None:
    def replace_one(i: int, opt: torch.optim.Optimizer) -> None:
        if i == 20:
            first = opt.param_groups[0]["params"][0]
            first.grad = torch.zeros_like(first)  # a hook that sets .grad to a new tensor

    rehearsal = Rehearsal()
    _, step = _captured(_model(), rehearsal, replace_one)
    assert rehearsal.captures == 2 and step.graphed[0].stopped is None
    assert step.graphed[0].step.bound()
