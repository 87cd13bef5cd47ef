"""Saved-activation strategies: what autograd keeps for backward, and in what form."""

from runner.stack.offload.component import OffloadComponent, build_offload
from runner.stack.offload.measure import measure_offload

__all__ = ["OffloadComponent", "build_offload", "measure_offload"]
