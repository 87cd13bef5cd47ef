"""CUDA graphs (``cudagraphs`` group): Inductor's CUDA-graph trees, recorded once and replayed every step, and
the static batch buffers that make replays hold. Imports the spine and ``torch_internals`` only.
"""

from runner.stack.cudagraphs.trees import CudaGraphs, CudaGraphsInactive, build_cudagraphs, mark_optimizer_state_static

__all__ = ["CudaGraphs", "CudaGraphsInactive", "build_cudagraphs", "mark_optimizer_state_static"]
