"""Inductor's CUDA-graph partitions: which nodes of a compiled graph run inside CUDA graphs, and why the others
do not; and torch 2.15's "dynamic shape ops" check on graph-level symbols for older torch (PR 197139)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.torch_internals.settings import TorchSettings

DYNAMIC_SHAPE_REASON = "dynamic shape ops"  # should_partition's reason for a node that uses a symbol (its last check)
MIN_SIZE_REASON = "fewer kernels than triton.cudagraph_min_partition_size"  # graph_partition's size threshold
# Added to cache_key_tag while the corrected check is installed: the caches key on Inductor's config, not on this
# patch, and must not hand a graph partitioned by one check to a process that uses the other.
FIX_TAG = "runner-cudagraph-partition-graph-symbols"


def _scheduler() -> Any:
    from torch._inductor import scheduler

    return scheduler


def graph_level_symbols(node: Any) -> list[str]:
    """The size, float and unbacked symbols a scheduler node uses (sorted), without loop indices and temporaries."""
    import sympy
    from torch.utils._sympy.symbol import SymT, symbol_is_type

    kinds = (SymT.SIZE, SymT.FLOAT, SymT.UNBACKED_INT, SymT.UNBACKED_FLOAT)
    symbols = _scheduler().get_scheduler_node_symbol_uses(node)
    return sorted(str(s) for s in symbols if isinstance(s, sympy.Symbol) and symbol_is_type(s, kinds))


def partition_check_counts_loop_indices() -> bool:
    """Whether ``should_partition`` counts loop-index symbols as dynamic shapes (torch before 2.15)."""
    return not hasattr(_scheduler(), "filter_graph_level_symbols")


def partition_on_graph_symbols_only(settings: TorchSettings) -> bool:
    """Give torch before 2.15 its "dynamic shape ops" check on graph-level symbols only; whether it was needed."""
    if not partition_check_counts_loop_indices():
        return False
    scheduler_class = _scheduler().Scheduler
    original = scheduler_class.should_partition

    def should_partition(self: Any, node: Any) -> str | None:
        reason: str | None = original(self, node)
        # The symbol check is should_partition's last: a node it alone keeps out has no other reason. A fused
        # node asks this method for each of its nodes, so its reason is already the corrected one.
        if reason == DYNAMIC_SHAPE_REASON and not graph_level_symbols(node):
            return None
        return reason

    settings.patch(scheduler_class, "should_partition", should_partition)
    from torch.compiler import config as compiler_config

    prior = str(compiler_config.cache_key_tag)
    if FIX_TAG not in prior.split("+"):
        settings.compiler("cache_key_tag", f"{prior}+{FIX_TAG}" if prior else FIX_TAG)
    return True


@dataclass(frozen=True)
class GraphPartitions:
    """How Inductor partitioned one compiled graph for CUDA graphs."""

    graph: str  # forward or backward, with Dynamo's compile id (forward 0/0)
    partitions: int
    graphed: int  # partitions recorded as CUDA graphs; the others run eagerly between them
    eager_nodes: dict[str, int] = field(default_factory=dict)  # reason -> scheduler nodes of eager partitions
    examples: dict[str, str] = field(default_factory=dict)  # reason -> the first such node's operator


def partition_summary(scheduler: Any, partitions: Sequence[Sequence[Any]], skipped: Sequence[bool]) -> GraphPartitions:
    """What ``graph_partition`` decided: the partitions, those CUDA-graphed, and why each eager node stays out."""
    reasons: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for partition, skip in zip(partitions, skipped, strict=True):
        if not skip:
            continue
        found = False
        for node in partition:
            reason = scheduler.should_partition(node)
            if reason:
                found = True
                reasons[reason] += 1
                examples.setdefault(reason, _operator(node))
        if not found:
            reasons[MIN_SIZE_REASON] += len(partition)
    from torch._guards import CompileContext
    from torch._inductor.virtualized import V

    graph = "backward" if getattr(V.graph, "is_backward", False) else "forward"
    if (compile_id := CompileContext.current_compile_id()) is not None:
        graph = f"{graph} {compile_id}"
    return GraphPartitions(graph=graph, partitions=len(partitions), graphed=sum(not s for s in skipped),
                           eager_nodes=dict(reasons), examples=examples)


def _operator(node: Any) -> str:
    for snode in node.get_nodes():
        origin = snode.node.get_origin_node() if snode.node is not None else None
        if origin is not None:
            return str(origin.target)
    return type(node.node).__name__


def observe_graph_partitions(settings: TorchSettings, callback: Callable[[GraphPartitions], None]) -> None:
    """Call ``callback`` with each compiled graph's partitions as Inductor decides them (not a cached graph's)."""
    scheduler_class = _scheduler().Scheduler
    original = scheduler_class.graph_partition

    def graph_partition(self: Any) -> Any:
        partitions, signatures = original(self)
        callback(partition_summary(self, partitions, [s.skip_cudagraph for s in signatures]))
        return partitions, signatures

    settings.patch(scheduler_class, "graph_partition", graph_partition)
