"""Saved-activation strategies: what autograd keeps for backward, and in what form.

``build_offload(cfg, device)`` returns the compile-stack component for ``offload.strategy``:

- ``none``: autograd saves activations as they are.
- ``bf16`` / ``fp8``: floating saved tensors stored as bfloat16, or float8_e4m3fn with a per-tensor
  scale, restored to their dtype, size and stride in backward. Under torch.compile (AOTAutograd
  backends) the hooks are traced into the compiled graphs; elsewhere they run as Python hooks.
- ``checkpoint``: recompute instead of save (per-block checkpoints, or the compiler's
  ``activation_memory_budget`` when ``memory_budget`` is set).
- ``cpu``: pinned host memory on a side stream (CUDA); on a CPU device a warned no-op.

``measure_offload`` measures saved bytes and gradient error against ``none`` on one batch.
"""

from runner.stack.offload.component import (
    CheckpointOffload,
    CudaOffload,
    HookOffload,
    OffloadComponent,
    build_offload,
)
from runner.stack.offload.measure import measure_offload, saved_bytes_meter

__all__ = [
    "CheckpointOffload",
    "CudaOffload",
    "HookOffload",
    "OffloadComponent",
    "build_offload",
    "measure_offload",
    "saved_bytes_meter",
]
