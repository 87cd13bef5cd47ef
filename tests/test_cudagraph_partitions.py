"""Which nodes of runner's compiled training step Inductor puts in CUDA graphs, asked of torch itself.

CUDA graphs need a GPU, but the decision does not: Inductor's scheduler asks ``should_partition`` of every
node of every compiled graph, on the CPU too. These tests compile runner's real training step (the
quickstart GPT through ``CompileStrategy``, Inductor) on the CPU with runner's CUDA-graph component
configured as on a GPU, and ask torch's own ``should_partition`` for every node as if it ran there
(``BaseSchedulerNode.is_gpu`` true, ``triton.cudagraphs`` on as ``mode="reduce-overhead"`` sets it), inside
``Scheduler.graph_partition``; the CPU code is then generated as always. The component's partition count
sees the same simulated decision. On torch before 2.15 (2.11 and 2.13 here) without runner's corrected
check, most nodes of the static step are left out as "dynamic shape ops" (docs/compile.md).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from runner.build import build_datamodule, build_module, build_strategy
from runner.config import compose, load
from runner.config.schema import CudaGraphMode, CudaGraphsConfig
from runner.stack.cudagraphs import CudaGraphs
from runner.stack.cudagraphs.partitions import fix_for
from runner.torch_internals import partitions


@dataclass(frozen=True)
class Decision:
    reason: str | None
    graph_symbols: tuple[str, ...]


class SimulatedGpu:
    """For every graph Inductor partitions: torch's own decision for each node as if on a GPU (kept in
    ``graphs``), passed to whatever observes ``graph_partition`` (runner's count); the code is generated
    from the unsimulated (CPU) partitioning."""

    def __init__(self) -> None:
        self.graphs: list[list[Decision]] = []

    @contextlib.contextmanager
    def simulate(self) -> Iterator[None]:
        from torch._inductor import config, scheduler

        prior = scheduler.BaseSchedulerNode.is_gpu
        scheduler.BaseSchedulerNode.is_gpu = lambda self: True  # type: ignore[method-assign]
        try:
            with config.patch({"triton.cudagraphs": True}):
                yield
        finally:
            scheduler.BaseSchedulerNode.is_gpu = prior  # type: ignore[method-assign]

    @contextlib.contextmanager
    def installed(self, pristine: Any) -> Iterator[None]:
        """Wrap ``graph_partition`` as it is now (runner's observer in it); ``pristine`` generates the code."""
        from torch._inductor import scheduler

        observed = scheduler.Scheduler.graph_partition

        def graph_partition(sched: Any) -> Any:
            with self.simulate():
                self.graphs.append([Decision(sched.should_partition(n), tuple(partitions.graph_level_symbols(n)))
                                    for n in sched.nodes])
                observed(sched)
            return pristine(sched)

        scheduler.Scheduler.graph_partition = graph_partition  # type: ignore[method-assign]
        try:
            yield
        finally:
            scheduler.Scheduler.graph_partition = observed  # type: ignore[method-assign]


def _step_partitions(policy: str, tmp_path: Path, skip_dynamic_graphs: bool = True) -> tuple[SimulatedGpu, dict]:
    """Compile one training step of the quickstart GPT (one layer) with runner's CUDA-graph settings; the simulated
    decisions and the component's figures."""
    from torch._inductor import scheduler

    # One layer of the quickstart's four: each layer's nodes are the same kinds, decided the same way, and
    # every graph here compiles in full (no cache), so more layers only cost Inductor time.
    cfg = load(compose(["+recipe=quickstart", "compile.background=disabled", f"dynamic={policy}",
                        "trainer.max_steps=1", "model.n_layer=1"], run_dir=str(tmp_path)))
    module, data, strategy = build_module(cfg), build_datamodule(cfg), build_strategy(cfg)
    graphs = CudaGraphs(CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead, skip_dynamic_graphs=skip_dynamic_graphs),
                        torch.device("cuda"))  # configured as on a GPU; nothing of it needs CUDA
    sim = SimulatedGpu()
    pristine = scheduler.Scheduler.graph_partition
    # A graph from the FX-graph or AOTAutograd cache is not partitioned again: compile it (kernels stay cached).
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graphs.configure()
        try:
            with sim.installed(pristine):
                trainer = L.Trainer(strategy=strategy, max_steps=1, logger=False, enable_checkpointing=False,
                                    enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
                trainer.fit(module, data)
        finally:
            graphs.teardown()
    assert scheduler.Scheduler.graph_partition is pristine  # the observer and the corrected check are gone
    assert len(sim.graphs) == 2, "the step compiles one forward and one backward graph"
    return sim, graphs.figures()


def _partitions(decisions: list[Decision]) -> tuple[int, int]:
    """(graphed, eager) partitions as torch groups the nodes: maximal runs with the same in/out decision."""
    out = [d.reason is not None for d in decisions]
    starts = [f for i, f in enumerate(out) if i == 0 or f != out[i - 1]]
    return starts.count(False), starts.count(True)


@pytest.mark.slow
def test_no_node_of_the_static_step_is_left_out_as_dynamic(tmp_path: Path) -> None:
    sim, figures = _step_partitions("static", tmp_path)
    for decisions in sim.graphs:
        assert all(d.graph_symbols == () for d in decisions), "a static step uses no size symbol"
        dynamic = [d for d in decisions if d.reason == partitions.DYNAMIC_SHAPE_REASON]
        assert dynamic == [], f"{len(dynamic)} of {len(decisions)} nodes left out as dynamic shape ops"
        assert {d.reason for d in decisions} == {None}
    # The count sees the same decision: one partition per graph, graphed, nothing left out.
    assert figures["cudagraphs/graphs_partitioned"] == 2
    assert figures["cudagraphs/partitions"] == figures["cudagraphs/partitions_graphed"] == 2
    assert figures["cudagraphs/eager_reasons"] == []


@pytest.mark.slow
def test_the_dynamic_policy_leaves_out_exactly_the_nodes_that_use_the_marked_size(tmp_path: Path) -> None:
    sim, figures = _step_partitions("dynamic", tmp_path)
    left_out = kept = 0
    for decisions in sim.graphs:
        for d in decisions:
            assert (d.reason == partitions.DYNAMIC_SHAPE_REASON) == bool(d.graph_symbols), d
        left_out += sum(d.reason is not None for d in decisions)
        kept += sum(d.reason is None for d in decisions)
    assert left_out and kept  # the sequence length reaches most nodes, not all
    graphed, eager = (sum(n) for n in zip(*map(_partitions, sim.graphs), strict=True))
    assert (figures["cudagraphs/partitions_graphed"], figures["cudagraphs/partitions"]) == (graphed, graphed + eager)
    [reason] = figures["cudagraphs/eager_reasons"]
    assert reason["reason"] == partitions.DYNAMIC_SHAPE_REASON and reason["nodes"] == left_out
    assert reason["fix"] == fix_for(partitions.DYNAMIC_SHAPE_REASON) and "dynamic=static" in reason["fix"]
    assert sorted(g.split()[0] for g in reason["graphs"]) == ["backward", "forward"]


def test_the_summary_says_what_ran_in_cuda_graphs_and_how_to_bring_in_the_rest(tmp_path: Path) -> None:
    """From the summary alone: all of the step in CUDA graphs, or which part is not, why, and the fix."""
    from runner.stack.cudagraphs.partitions import PartitionCount
    from runner.telemetry.report import format_summary, write_report

    count = PartitionCount()
    assert count.figures() == {}  # nothing partitioned (e.g. every graph from the cache): no claim
    count.graphs += [partitions.GraphPartitions("forward 0/0", 1, 1), partitions.GraphPartitions("backward 0/0", 1, 1)]
    whole = format_summary({"cudagraphs/active": True, **count.figures()})
    assert "partitions in CUDA graphs" in whole and "2 of 2 (all)" in whole and "not in CUDA graphs" not in whole
    reason = partitions.DYNAMIC_SHAPE_REASON
    count.graphs += [partitions.GraphPartitions("forward 1/0", 3, 1, {reason: 7, "cpu ops": 1},
                                                {reason: "aten.mm.default", "cpu ops": "aten.add.Tensor"})]
    figures = {"cudagraphs/active": True, "compile/cache_hits": 1, **count.figures()}
    text = format_summary(figures)
    assert "3 of 5; cached graphs not counted" in text
    assert "7 nodes: dynamic shape ops (e.g. aten.mm.default; forward 1/0). Fix:" in text
    assert "dynamic=static" in text and "cudagraphs.skip_dynamic_graphs=false" in text
    assert "1 nodes: cpu ops" in text and "keep the step's tensors on the GPU" in text
    write_report(tmp_path, figures)
    assert "## Not in CUDA graphs" in (tmp_path / "report.md").read_text()
    graphs = CudaGraphs(CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead), torch.device("cuda"))
    graphs.partitions = count
    line = graphs.summary()  # the end-of-fit line of CompileStrategy in a user's Trainer
    assert line.startswith("CUDA graphs: 3 of 5 partitions graphed") and "7 nodes for dynamic shape ops" in line
