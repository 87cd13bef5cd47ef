"""CUDA graphs (``cudagraphs`` group): Inductor's CUDA-graph trees, recorded once and replayed every step, the
static batch buffers that make replays hold, and the count of what Inductor put in CUDA graphs. Imports the
spine, ``runner.data``'s batch walk and ``torch_internals`` only.
"""

from runner.stack.cudagraphs.partitions import PartitionCount
from runner.stack.cudagraphs.trees import CudaGraphs, CudaGraphsInactive, build_cudagraphs, mark_optimizer_state_static

__all__ = ["CudaGraphs", "CudaGraphsInactive", "PartitionCount", "build_cudagraphs", "mark_optimizer_state_static"]
