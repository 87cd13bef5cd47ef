"""``PartitionCount``: what of the compiled step runs inside CUDA graphs, counted as Inductor decides it."""

from __future__ import annotations

import re
from typing import Any

from runner.torch_internals import partitions
from runner.torch_internals import settings as torch_settings

_DYNAMIC_FIX = ("these kernels use a dynamic size: fix the shapes (dynamic=static, or dynamic=bucket, which pads "
                "to the lengths of dynamic.buckets) so every kernel is graphed, or "
                "cudagraphs.skip_dynamic_graphs=false to record one CUDA graph per size")
# (regex on torch's reason, fix), first match wins.
_FIXES: tuple[tuple[str, str], ...] = (
    (re.escape(partitions.DYNAMIC_SHAPE_REASON), _DYNAMIC_FIX),
    ("DeviceCopy ops", "a copy between devices inside the compiled step (.to(), .cpu(), a CPU scalar tensor): "
                       "make the tensor on the GPU, or move the copy out of the step"),
    ("unbacked binding ops", "an op whose output size depends on the data (nonzero, masked indexing, .item()): "
                             "keep sizes fixed (torch.where, a multiplied mask)"),
    ("Conditional ops", "torch.cond in the step: a CUDA graph cannot record a branch on data"),
    ("CUDAGraph-unsafe", "an op its author marked unsafe to record (torch.Tag.cudagraph_unsafe): nothing to "
                         "change in runner"),
    ("cudagraph-unsafe unbacked symint", "a size produced by an op marked unsafe to record: nothing to change "
                                         "in runner"),
    ("custom partition op", "torch._inductor.config.custom_should_partition_ops names this op"),
    (re.escape(partitions.MIN_SIZE_REASON), "partitions too small for the threshold: lower "
                                    "triton.cudagraph_min_partition_size (compile.options)"),
    (r"^[a-z]+(:\d+)? ops$", "ops on a device without CUDA graphs (CPU tensors inside the compiled step): keep "
                             "the step's tensors on the GPU"),
)


def fix_for(reason: str) -> str:
    """The change that brings nodes left out for ``reason`` into CUDA graphs (torch's reason text)."""
    for pattern, fix in _FIXES:
        if re.search(pattern, reason):
            return fix
    return "see torch's reason (TORCH_LOGS=+cudagraphs prints each node)"


class PartitionCount:
    """Counts the CUDA-graph partitions of every graph Inductor compiles while it is installed."""

    def __init__(self) -> None:
        self.graphs: list[partitions.GraphPartitions] = []

    def install(self, settings: torch_settings.TorchSettings) -> None:
        """Observe torch's partitioning until ``settings`` is restored."""
        partitions.observe_graph_partitions(settings, self.graphs.append)

    def figures(self) -> dict[str, Any]:
        """``cudagraphs/partitions``, ``partitions_graphed`` and the reasons of the rest, with their fixes.
        Empty until a graph was partitioned (a run whose graphs all came from the compile cache)."""
        if not self.graphs:
            return {}
        nodes: dict[str, int] = {}
        examples: dict[str, str] = {}
        graphs: dict[str, list[str]] = {}
        for g in self.graphs:
            for reason, count in g.eager_nodes.items():
                nodes[reason] = nodes.get(reason, 0) + count
                examples.setdefault(reason, g.examples.get(reason, "?"))
                graphs.setdefault(reason, []).append(g.graph)
        reasons = [{"reason": r, "nodes": n, "graphs": graphs[r], "example": examples[r], "fix": fix_for(r)}
                   for r, n in sorted(nodes.items(), key=lambda item: -item[1])]
        return {"cudagraphs/graphs_partitioned": len(self.graphs),
                "cudagraphs/partitions": sum(g.partitions for g in self.graphs),
                "cudagraphs/partitions_graphed": sum(g.graphed for g in self.graphs),
                "cudagraphs/eager_reasons": reasons}
