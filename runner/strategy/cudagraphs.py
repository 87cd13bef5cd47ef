"""CUDA graphs (``cudagraphs`` group): Inductor's CUDA-graph trees, ``mode="reduce-overhead"``.

On a device other than CUDA, torch silently ignores every CUDA-graph option; runner says so once,
records ``cudagraphs/active=False``, and the run goes on.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import torch
from torch import nn

from runner.config.schema import CudaGraphMode, CudaGraphsConfig
from runner.strategy.component import StackComponent


class CudaGraphs(StackComponent):
    """Marks step boundaries for CUDA-graph trees and keeps parameters at static addresses."""

    name = "cudagraphs"

    def __init__(self, cfg: CudaGraphsConfig) -> None:
        self.cfg = cfg
        self.steps = 0

    def configure(self) -> None:
        import torch._inductor.config as inductor_config

        # Each new size would record (and keep) another graph: skip dynamic-shape graphs instead.
        inductor_config.triton.cudagraph_skip_dynamic_graphs = self.cfg.skip_dynamic_graphs

    def apply(self, module: nn.Module) -> None:
        # Parameters never move: telling the compiler lets CUDA graphs read them in place instead of
        # copying each into a static buffer every replay.
        for p in module.parameters():
            torch._dynamo.mark_static_address(p)

    @contextlib.contextmanager
    def _step(self) -> Iterator[None]:
        # The first warmup_steps run eagerly, so lazily built state (optimizer moments, caches) exists
        # before anything is recorded.
        stance = "force_eager" if self.steps < self.cfg.warmup_steps else "default"
        with torch.compiler.set_stance(stance):
            torch.compiler.cudagraph_mark_step_begin()
            yield
        self.steps += 1

    def step_context(self) -> ContextManager[Any]:
        return self._step()

    def summary(self) -> dict[str, Any]:
        return {"cudagraphs/active": True, "cudagraphs/mode": self.cfg.mode.value}


class CudaGraphsInactive(StackComponent):
    """CUDA graphs requested on a device that has none: a no-op that reports it."""

    name = "cudagraphs"

    def __init__(self, requested: bool, device: torch.device) -> None:
        self.requested = requested
        if requested:
            warnings.warn(
                f"cudagraphs.mode=reduce_overhead needs a CUDA device; this run is on {device.type}, so CUDA "
                "graphs are not active (logged as cudagraphs/active=False). Use cudagraphs=disabled to "
                "silence this.",
                stacklevel=2,
            )

    def summary(self) -> dict[str, Any]:
        return {"cudagraphs/active": False, "cudagraphs/requested": self.requested}


def build_cudagraphs(cfg: CudaGraphsConfig, device: torch.device) -> StackComponent:
    """The CUDA-graph component for the device."""
    if cfg.mode is CudaGraphMode.reduce_overhead and device.type == "cuda":
        return CudaGraphs(cfg)
    return CudaGraphsInactive(cfg.mode is CudaGraphMode.reduce_overhead, device)
