"""``StaticBatch``: each training batch copied into persistent, static-address device buffers."""

from __future__ import annotations

from typing import Any

import torch

from runner.data.batch import Path, map_tensors, walk_tensors
from runner.torch_internals import runtime


# Under CUDA-graph trees an input at a new address is copied into the graph's buffer on every replay, except the
# inputs Inductor treats as static, whose address must never change: parameters, buffers, tensors marked static and,
# in the backward graph, every tensor the forward saved. With compile.scope=step the backward saves the batch (the
# ids for the embedding's backward, the targets for the cross-entropy's); Lightning moves each batch to the device
# anew, and a new address re-records the backward ("static input data pointer changed"), which torch does not count
# toward cudagraph_unexpected_rerecord_limit. So the batch is copied into buffers that live as long as the fit: the
# same strides, the shape policy's marks copied each step, one buffer for a tensor that appears twice (the aliasing
# eager sees), the containers' types kept (namedtuple, dataclass, BatchEncoding). One set per batch signature, up to
# max_signatures; later new signatures pass through (passed_through).
class StaticBatch:
    """Copies the batch's tensors on ``device_type`` (nested in tuples, lists, mappings and dataclasses) into
    persistent static buffers; tensors elsewhere (a CPU-side length list) pass as they are."""

    def __init__(self, device_type: str = "cuda", max_signatures: int = 16) -> None:
        self.device_type = device_type
        self.max_signatures = max_signatures
        self.buffers: dict[tuple[Any, ...], torch.Tensor] = {}
        self.signatures: set[tuple[Any, ...]] = set()
        self.copies = 0
        self.passed_through = 0

    def __call__(self, batch: Any) -> Any:
        """``batch`` with every tensor on the device replaced by its static buffer, holding the same values."""
        first: dict[int, tuple[Path, torch.Tensor]] = {}
        signature: list[tuple[Any, ...]] = []
        for path, tensor in walk_tensors(batch):
            if tensor.device.type != self.device_type:
                continue
            if id(tensor) in first:  # the same tensor again: it keeps the first one's buffer
                signature.append((path, "same as", first[id(tensor)][0]))
            else:
                first[id(tensor)] = (path, tensor)
                signature.append((path, tensor.shape, tensor.stride(), tensor.dtype))
        if not first:
            return batch
        key = tuple(signature)
        if key not in self.signatures:
            if len(self.signatures) >= self.max_signatures:
                self.passed_through += 1
                return batch
            self.signatures.add(key)
        replaced = {i: self.static(path, tensor) for i, (path, tensor) in first.items()}
        return map_tensors(batch, lambda t: replaced.get(id(t), t))

    def static(self, path: Path, tensor: torch.Tensor) -> torch.Tensor:
        """The static buffer for ``tensor`` at ``path`` in the batch, holding its values and its shape marks."""
        key = (path, tensor.shape, tensor.stride(), tensor.dtype, tensor.device)
        buffer = self.buffers.get(key)
        if buffer is None:
            # preserve_format keeps the strides of a dense tensor (channels-last, transposed); a tensor with
            # gaps or overlaps gets the dense layout closest to it.
            buffer = self.buffers[key] = torch.empty_like(tensor, memory_format=torch.preserve_format)
            runtime.mark_static_address(buffer)
        buffer.copy_(tensor)
        runtime.copy_shape_marks(tensor, buffer)
        self.copies += 1
        return buffer

    def clear(self) -> None:
        """Free every buffer (the fit ended); a later batch starts new ones."""
        self.buffers.clear()
        self.signatures.clear()
