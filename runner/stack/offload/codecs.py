"""How a saved tensor is stored between forward and backward, and how it is restored."""

from __future__ import annotations

from typing import Any

import torch

from runner.config.schema.options import Codec

_SCALE_EPS = 1e-12  # keeps the scale of an all-zero tensor finite

Packed = tuple[Any, ...]
_VIEW = "view"  # tag of a packed view (eager only; the traced path packs graph values, not views)
_EXPANDED = "expanded"  # tag of a tensor with zero strides (an expanded view), packed at its real size


def encode(x: torch.Tensor, codec: Codec) -> Packed:
    """Pack a floating tensor as the codec's payload dtype (its row in ``runner.config.schema.options``)."""
    # Detach: the pack hook must not record autograd history (it would keep ``x`` alive).
    x = x.detach()
    broadcast = expanded_dims(x)
    if broadcast:
        # An expanded view (stride 0) holds one copy of its data: pack that, expand again on decode.
        # Materialising it would store it at full size, and restoring its stride with
        # ``empty_strided`` + ``copy_`` fails (a write to overlapping memory).
        compact = x
        for d in broadcast:
            compact = compact.narrow(d, 0, 1)
        return (_EXPANDED, encode(compact, codec), tuple(x.size()))
    dtype = getattr(torch, codec.payload)
    if not codec.scaled:
        payload = x.to(dtype)
        return (payload, x.dtype, *_layout(payload, x))
    xf = x.float()
    scale = (xf.abs().amax() / float(torch.finfo(dtype).max)).clamp(min=_SCALE_EPS)
    payload = (xf / scale).to(dtype)
    return (payload, scale, x.dtype, *_layout(payload, x))


def encode_storage(x: torch.Tensor, codec: Codec) -> Packed:
    """Pack the whole storage under ``x`` as one flat tensor (eager path only)."""
    numel = x.untyped_storage().nbytes() // x.element_size()
    flat = torch.as_strided(x.detach(), (numel,), (1,), 0)
    return encode(flat, codec)


def view_of(storage_packed: Packed, x: torch.Tensor) -> Packed:
    """A packed view: the packed storage plus ``x``'s size, stride and offset."""
    return (_VIEW, storage_packed, tuple(x.size()), tuple(x.stride()), x.storage_offset())


def decode(packed: Any) -> torch.Tensor:
    """Restore what ``encode`` or ``view_of`` produced; a tensor passed through is returned as is."""
    if isinstance(packed, torch.Tensor):
        return packed
    if packed[0] == _EXPANDED:
        _, compact, size = packed
        return decode(compact).expand(size)
    if isinstance(packed[0], str):  # view_of: rebuild the view on the decoded storage
        _, storage_packed, size, stride, offset = packed
        return decode(storage_packed).as_strided(size, stride, offset)
    if len(packed) == 5:
        payload, dtype, size, stride, restride = packed
        y = payload.to(dtype)
    else:
        payload, scale, dtype, size, stride, restride = packed
        y = (payload.to(torch.float32) * scale).to(dtype)
    if restride:
        out = torch.empty_strided(size, stride, dtype=dtype, device=y.device)
        out.copy_(y)
        return out
    return y


def expanded_dims(x: torch.Tensor) -> list[int]:
    """Dims of ``x`` that are broadcast (stride 0, size > 1). Strides are static in practice; a
    symbolic one is treated as not broadcast rather than guarded on."""
    dims = []
    for d, (size, stride) in enumerate(zip(x.size(), x.stride(), strict=True)):
        if isinstance(stride, int) and isinstance(size, int) and stride == 0 and size > 1:
            dims.append(d)
    return dims


def _restride(payload: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether decode must copy into ``x``'s exact strides (``.to`` only keeps dense layouts)."""
    return tuple(payload.stride()) != tuple(x.stride())


def _layout(payload: torch.Tensor, x: torch.Tensor) -> tuple[Any, Any, bool]:
    """``(size, stride, restride)``: ``x``'s size and stride only when decode must restore them."""
    restride = _restride(payload, x)
    return (tuple(x.size()), tuple(x.stride()), True) if restride else (None, None, False)


def stored_nbytes(x: torch.Tensor) -> int:
    """Bytes of ``x``'s elements (not its storage); symbolic sizes use their hint."""
    numel = x.numel()
    if isinstance(numel, torch.SymInt):
        # A dynamic dimension: decide on the size seen when tracing rather than install a guard.
        hint = getattr(numel.node, "hint", None)
        numel = int(hint) if hint is not None else 1 << 62
    return int(numel) * x.element_size()
