"""Whether anything of the graph-safe optimizer step would be left out of its CUDA graph, asked on the CPU.

The step is captured whole by ``torch.cuda.graph`` (no Inductor partitioning: ``tests/test_cudagraph_partitions.py``
asks Inductor's ``should_partition`` for the compiled training step, which this function never goes through). What
a capture cannot hold is an op torch itself tags as unsafe for CUDA graphs: a host read of a device value
(``data_dependent_output``: ``.item()``, ``bool(tensor)``), an output whose size depends on data
(``dynamic_output_shape``: ``nonzero``), or an op tagged ``cudagraph_unsafe``. Every op the step dispatches is
recorded on the CPU, through the same function the GPU captures, and checked against those tags.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from runner.config.schema import OptimizerPolicy
from runner.stack.optimizer.graphed import Clipping
from runner.stack.optimizer.step import OptimizerStep

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
