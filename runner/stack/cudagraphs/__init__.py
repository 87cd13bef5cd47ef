"""CUDA graphs (``cudagraphs`` group): Inductor's CUDA-graph trees, the static batch buffers that make replays hold,
and the count of what Inductor put in CUDA graphs."""

from runner.stack.cudagraphs.partitions import PartitionCount
from runner.stack.cudagraphs.trees import CudaGraphs, CudaGraphsInactive, build_cudagraphs

__all__ = ["CudaGraphs", "CudaGraphsInactive", "PartitionCount", "build_cudagraphs"]
