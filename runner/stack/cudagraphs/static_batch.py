"""``StaticBatch``: each training batch copied into persistent, static-address device buffers.

Under CUDA-graph trees a graph input at a new address is copied into the graph's own buffer on every
replay, except the inputs Inductor treats as static, whose address must never change: parameters,
buffers, tensors marked static, and, in the backward graph, every tensor the forward saved. When the
step compiles the loss (``compile.scope=step``), the backward saves the batch itself: the token ids for
the embedding's backward, the targets for the cross-entropy's. Lightning moves each batch to the device
anew, so those saved inputs arrive at whatever address the caching allocator hands out; a changed
address re-records the backward graph ("static input data pointer changed"), which torch does not count
toward ``cudagraph_unexpected_rerecord_limit``. With plain Lightning the allocator happens to reuse the
same block every step; any other small per-step allocation (a padding counter, a logged clone, a
non-finite flag) moves it, and the graphs record again, step after step.

So the batch is copied (one device-to-device copy per tensor, the copy the graph would otherwise make
into its own input buffer) into buffers that live as long as the fit, marked static: the forward reads
them in place and the backward's saved batch never moves. One set of buffers per batch signature
(shapes and dtypes); a run whose shapes keep changing stops adding buffers at ``max_signatures`` and
passes later new signatures through as they are (counted in ``passed_through``).
"""

from __future__ import annotations

from typing import Any

import torch

from runner import torch_internals as ti

Path = tuple[Any, ...]


class StaticBatch:
    """Copies the batch's tensors on ``device_type`` (nested in tuples, lists and dicts) into persistent
    static buffers; tensors elsewhere (a CPU-side length list) pass as they are."""

    def __init__(self, device_type: str = "cuda", max_signatures: int = 16) -> None:
        self.device_type = device_type
        self.max_signatures = max_signatures
        self.buffers: dict[tuple[Path, torch.Size, torch.dtype, torch.device], torch.Tensor] = {}
        self.signatures: set[tuple[Any, ...]] = set()
        self.copies = 0
        """Tensors copied into their static buffer."""
        self.passed_through = 0
        """Batches passed on as they were: a new signature after ``max_signatures``."""

    def __call__(self, batch: Any) -> Any:
        """``batch`` with every CUDA tensor replaced by its static buffer, holding the same values."""
        tensors: list[tuple[Path, torch.Tensor]] = []
        _collect(batch, (), tensors, self.device_type)
        if not tensors:
            return batch
        signature = tuple((path, t.shape, t.dtype) for path, t in tensors)
        if signature not in self.signatures:
            if len(self.signatures) >= self.max_signatures:
                self.passed_through += 1
                return batch
            self.signatures.add(signature)
        return _rebuild(batch, (), self)

    def static(self, path: Path, tensor: torch.Tensor) -> torch.Tensor:
        """The static buffer for ``tensor`` at ``path`` in the batch, holding its values."""
        key = (path, tensor.shape, tensor.dtype, tensor.device)
        buffer = self.buffers.get(key)
        if buffer is None:
            buffer = self.buffers[key] = torch.empty_like(tensor, memory_format=torch.contiguous_format)
            ti.mark_static_address(buffer)
        buffer.copy_(tensor)
        self.copies += 1
        return buffer


def _collect(value: Any, path: Path, out: list[tuple[Path, torch.Tensor]], device_type: str) -> None:
    if isinstance(value, torch.Tensor):
        if value.device.type == device_type:
            out.append((path, value))
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _collect(item, (*path, i), out, device_type)
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect(item, (*path, key), out, device_type)


def _rebuild(value: Any, path: Path, batch: StaticBatch) -> Any:
    if isinstance(value, torch.Tensor):
        return batch.static(path, value) if value.device.type == batch.device_type else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple keeps its type
        return type(value)(*(_rebuild(v, (*path, i), batch) for i, v in enumerate(value)))
    if isinstance(value, (tuple, list)):
        return type(value)(_rebuild(v, (*path, i), batch) for i, v in enumerate(value))
    if isinstance(value, dict):
        return type(value)({k: _rebuild(v, (*path, k), batch) for k, v in value.items()})
    return value
