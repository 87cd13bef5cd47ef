"""Saved-activation strategies: what autograd keeps for backward, and in what form."""

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
