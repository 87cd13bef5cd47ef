"""Saved-tensor hooks that compile (one hook pair both traceable and eager-safe), and the codecs they store saved
tensors with between forward and backward."""

from __future__ import annotations

import itertools
import weakref
from collections import Counter
from typing import Any, Optional

import torch
import torch.fx
from torch import nn

from runner.config.schema.options import Codec
from runner.stack.offload import policy
from runner.torch_internals import observation, runtime

_SCALE_EPS = 1e-12  # keeps the scale of an all-zero tensor finite

Packed = tuple[Any, ...]
_VIEW = "view"  # tag of a packed view (eager only; the traced path packs graph values, not views)
_EXPANDED = "expanded"  # tag of a tensor with zero strides (an expanded view), packed at its real size


def encode(x: torch.Tensor, codec: Codec) -> Packed:
    """Pack a floating tensor as the codec's payload dtype (its row in ``runner.config.schema.options``)."""
    # Detach: the pack hook must not record autograd history (it would keep ``x`` alive).
    x = x.detach()
    compact, expanded = compacted(x)
    if expanded:
        # An expanded view (stride 0) holds one copy of its data: pack that, expand again on decode.
        # Materialising it would store it at full size, and restoring its stride with
        # ``empty_strided`` + ``copy_`` fails (a write to overlapping memory).
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
    return restrided(y, size, stride) if restride else y


def restrided(y: torch.Tensor, size: Any, stride: Any) -> torch.Tensor:
    """``y``'s values in a new tensor of exactly ``size`` and ``stride`` (``.to`` only keeps dense layouts)."""
    out = torch.empty_strided(size, stride, dtype=y.dtype, device=y.device)
    out.copy_(y)
    return out


def compacted(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``x`` narrowed to one element along each broadcast dim (stride 0, size > 1), and whether it had any. Strides
    are static in practice; a symbolic one is treated as not broadcast rather than guarded on."""
    compact = x
    for d, (size, stride) in enumerate(zip(x.size(), x.stride(), strict=True)):
        if isinstance(stride, int) and isinstance(size, int) and stride == 0 and size > 1:
            compact = compact.narrow(d, 0, 1)
    return compact, compact is not x


def _layout(payload: torch.Tensor, x: torch.Tensor) -> tuple[Any, Any, bool]:
    """``(size, stride, restride)``: ``x``'s size and stride only when decode must restore them (``.to`` only keeps
    dense layouts)."""
    restride = tuple(payload.stride()) != tuple(x.stride())
    return (tuple(x.size()), tuple(x.stride()), True) if restride else (None, None, False)


def stored_nbytes(x: torch.Tensor) -> int:
    """Bytes of ``x``'s elements (not its storage); symbolic sizes use their hint."""
    numel = x.numel()
    if isinstance(numel, torch.SymInt):
        # A dynamic dimension: decide on the size seen when tracing rather than install a guard.
        hint = getattr(numel.node, "hint", None)
        numel = int(hint) if hint is not None else 1 << 62
    return int(numel) * x.element_size()


_CACHE_VERSION = "runner.stack.offload.hooks/1"  # bump when pack/unpack trace to something different
_REGISTRY: weakref.WeakValueDictionary[int, SavedTensorCodec] = weakref.WeakValueDictionary()
_IDS = itertools.count()


def _pack_entry(x: torch.Tensor, codec_id: int) -> Any:
    """The function the pack graph calls (a graph leaf, so its Python runs at trace time)."""
    return _REGISTRY[codec_id].pack(x)


def _unpack_entry(packed: Any, codec_id: int) -> torch.Tensor:
    """The function the unpack graph calls. It needs no codec state: backward may run after the
    component that packed is gone."""
    return decode(packed)


# The hook pair is two torch.fx.GraphModules, each one call to a module-level function. Inside a compiled region,
# AOTAutograd inlines GraphModule hooks (pack into the forward's epilogue, unpack into the backward's prologue), so
# the compiled forward returns the packed tensors; outside one (eager, graph breaks, compiled autograd) the same
# modules run as plain Python hooks. Decisions read only dtype, size and module membership, so both paths agree.
# Built once per codec and reused every step: Dynamo guards on the identity of the active hooks, and a new pair
# would recompile every graph.
def _hook_graph(fn: Any, codec_id: int, cache_hash: str, name: str) -> torch.fx.GraphModule:
    # Built by hand rather than by symbolic_trace: the codec id is a constant argument, so the graph
    # holds only a module-level function and an int (picklable for AOTAutograd's cache key).
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    call = graph.call_function(fn, (x, codec_id))
    runtime.mark_wrapped(call, cache_hash)
    graph.output(call)
    return torch.fx.GraphModule(torch.nn.Module(), graph, class_name=name)


class SavedTensorCodec:
    """Packs floating saved tensors as bf16 or fp8; everything else passes through."""

    def __init__(self, codec: Codec, min_bytes: int, exclude: tuple[str, ...]) -> None:
        self.codec = codec
        self.min_bytes = int(min_bytes)
        self.exclude = tuple(exclude)
        self.excluded: frozenset[str] = frozenset()
        self.counts: Counter[str] = Counter()
        self._excluded_depth = policy.ExcludedDepth()  # > 0 while an excluded module runs eagerly
        self._held: set[int] = set()  # storages alive anyway: parameters and buffers
        self._batch: set[int] = set()  # ... and this step's batch
        self._model: Optional[nn.Module] = None
        self._by_storage: Optional[dict[int, tuple[weakref.ref[torch.Tensor], int, Any]]] = None
        self._cache_hits = 0  # AOTAutograd cache hits in this process before ``attach``
        self.codec_id = next(_IDS)
        _REGISTRY[self.codec_id] = self
        self._build_graphs()

    def _build_graphs(self) -> None:
        digest = f"{_CACHE_VERSION}:{self.codec}:{self.min_bytes}:{sorted(self.excluded)}"
        self.pack_gm = _hook_graph(_pack_entry, self.codec_id, digest, "OffloadPack")
        self.unpack_gm = _hook_graph(_unpack_entry, self.codec_id, digest, "OffloadUnpack")

    # -- setup ---------------------------------------------------------------------------------
    def attach(self, model: nn.Module) -> None:
        """Resolve ``exclude`` against ``model`` and track excluded modules when they run eagerly."""
        self._model = model
        self._cache_hits = observation.counter_now("aot_cache_hit")
        self.excluded = policy.excluded_module_names(model, self.exclude)
        self._build_graphs()  # the cache hash covers the resolved exclusions
        self._excluded_depth.attach(model, self.excluded)

    def begin_step(self) -> None:
        """Reset per-step eager state (entered by the component's ``step_context``)."""
        self._excluded_depth.reset()
        self._by_storage = {}
        if self._model is not None and not self._held:
            # Once: parameters do not move during training (optimizers update them in place).
            tensors = itertools.chain(self._model.parameters(), self._model.buffers())
            self._held = policy.held_storages(tensors)

    def end_step(self) -> None:
        """Drop per-step eager state; the autograd graph keeps what it saved."""
        self._by_storage = None

    def hold(self, tensors: Any) -> None:
        """Declare this step's batch alive anyway: packing it would only add memory."""
        self._batch = {
            t.untyped_storage().data_ptr()
            for t in runtime.tree_leaves(tensors)
            if isinstance(t, torch.Tensor) and t.is_floating_point()
        }

    # -- hooks -----------------------------------------------------------------------------------
    def pack(self, x: torch.Tensor) -> Any:
        """Pack hook body (runs eagerly on real tensors, or at trace time on fake ones)."""
        node = runtime.traced_saved_node()
        path = "traced" if node is not None else "eager"
        nbytes = stored_nbytes(x)
        if not policy.wants_packing(x, nbytes, self.codec.itemsize, self.min_bytes):
            self.counts[f"{path}_skipped"] += 1
            return x
        if node is not None:
            # AOTAutograd traces each hook twice per saved value; counts are per trace, not per step.
            if policy.node_is_excluded(node, self.excluded):
                self.counts["traced_skipped"] += 1
                return x
            self.counts["traced_packed"] += 1
            return encode(x, self.codec)
        if self._excluded_depth.depth > 0 or self._is_held(x):
            self.counts["eager_skipped"] += 1
            return x
        self.counts["eager_packed"] += 1
        storage = x.untyped_storage()
        if self._by_storage is None or 2 * nbytes < storage.nbytes():
            # A small slice of a larger storage (one of q/k/v): pack just the slice.
            return encode(x, self.codec)
        # Several saved tensors are often views of one storage (a block input saved by LayerNorm
        # and by the residual path; SDPA's output and the projection's reshaped input): pack the
        # storage once and rebuild each view. The entry is valid while the tensor that created it
        # is alive (so the storage is too) and unmodified (same version counter).
        key = storage.data_ptr()
        entry = self._by_storage.get(key)
        if entry is None or entry[0]() is None or entry[1] != x._version:
            entry = (weakref.ref(x), x._version, encode_storage(x, self.codec))
            self._by_storage[key] = entry
        return view_of(entry[2], x)

    def unpack(self, packed: Any) -> torch.Tensor:
        """Unpack hook body."""
        return decode(packed)

    def _is_held(self, x: torch.Tensor) -> bool:
        base = x._base if x._base is not None else x
        if base.is_leaf and base.requires_grad:  # a trainable parameter (or a view of one)
            return True
        ptr = x.untyped_storage().data_ptr()
        return ptr in self._held or ptr in self._batch

    def path(self, steps: int) -> str:
        """Which path the hooks took: traced, eager_hooks, mixed, none, cached, or pending (no step yet)."""
        eager = self.counts["eager_packed"] + self.counts["eager_skipped"]
        traced = self.counts["traced_packed"]
        if steps == 0 and not (eager or traced):
            return "pending"
        if eager and traced:
            return "mixed"
        if eager:
            return "eager_hooks"
        if traced:
            return "traced"
        return "cached" if observation.counter_now("aot_cache_hit") > self._cache_hits else "none"
