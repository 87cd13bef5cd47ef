"""Saved activations moved to pinned host memory on a side stream (CUDA only).

The design follows torchtune's ``OffloadActivations``: pack starts an asynchronous device-to-host
copy into pinned memory on a dedicated stream and lets the device tensor go; unpack copies it back
on the compute stream after waiting for the copy to finish. The hooks are plain Python (stream and
event calls cannot be traced into a graph), so under torch.compile they run eagerly after each
compiled forward. On a CPU device the strategy is pointless and ``build_offload`` never builds this.

Stream-safety, per the CUDA semantics notes of the PyTorch docs:
- the side stream waits for the compute stream before copying, so it reads finished activations;
- ``record_stream`` tells the caching allocator the device tensor is in use on the side stream, so
  its memory is not handed out again before the copy completes;
- unpack makes the compute stream wait on the copy's event before reading the host tensor.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch.utils.weak import WeakIdKeyDictionary

from runner.stack.offload import codecs, policy


class PinnedOffloadHooks:
    """Pack/unpack hooks that offload large floating saved tensors to pinned host memory."""

    def __init__(self, device: torch.device, min_bytes: int) -> None:
        if device.type != "cuda":
            raise ValueError(f"cpu offload needs a CUDA device, got {device}")
        self.device = device
        self.min_bytes = int(min_bytes)
        self.stream: Optional[torch.cuda.Stream] = None  # created lazily, on first use
        self.excluded = policy.ExcludedDepth()  # hooked on the excluded modules by the component
        self.held: set[int] = set()
        self.offloaded_bytes = 0
        self._dedupe: Optional[WeakIdKeyDictionary] = None

    def begin_step(self) -> None:
        self._dedupe = WeakIdKeyDictionary()

    def end_step(self) -> None:
        self._dedupe = None

    def pack(self, x: torch.Tensor) -> Any:
        """Start copying ``x`` to pinned host memory; return what unpack needs."""
        nbytes = codecs.stored_nbytes(x)
        base = x._base if x._base is not None else x
        if (
            x.device.type != "cuda"
            or not policy.wants_packing(x, nbytes, 0, self.min_bytes)
            or self.excluded.depth > 0
            or (base.is_leaf and base.requires_grad)
            or x.untyped_storage().data_ptr() in self.held
        ):
            return x
        if self._dedupe is not None and x in self._dedupe:
            return self._dedupe[x]
        if self.stream is None:
            self.stream = torch.cuda.Stream(device=x.device)
        compute = torch.cuda.current_stream(x.device)
        self.stream.wait_stream(compute)
        # An expanded view (stride 0) is copied at its real size and expanded again on unpack.
        broadcast = codecs.expanded_dims(x)
        compact = x.detach()
        for d in broadcast:
            compact = compact.narrow(d, 0, 1)
        with torch.cuda.stream(self.stream):
            # Stored contiguous (a strided view would pin its whole base); unpack re-strides.
            host = torch.empty(compact.size(), dtype=x.dtype, pin_memory=True)
            host.copy_(compact, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        x.record_stream(self.stream)
        self.offloaded_bytes += compact.numel() * compact.element_size()
        packed = (host, event, x.device, tuple(x.size()), tuple(compact.stride()), bool(broadcast))
        if self._dedupe is not None:
            self._dedupe[x] = packed
        return packed

    def unpack(self, packed: Any) -> torch.Tensor:
        """Bring a packed tensor back to the device, with its original size and stride."""
        if isinstance(packed, torch.Tensor):
            return packed
        host, event, device, size, stride, expanded = packed
        compute = torch.cuda.current_stream(device)
        compute.wait_event(event)  # the device-to-host copy must be complete before reading host
        # Pinned memory stays valid until the copy ends: the caching host allocator records the use.
        y = host.to(device, non_blocking=True)
        if tuple(y.stride()) != stride:
            out = torch.empty_strided(tuple(host.size()), stride, dtype=y.dtype, device=device)
            out.copy_(y)
            y = out
        return y.expand(size) if expanded else y
