"""Pure decisions: which modules are blocks, which are excluded, which saved tensors are packed."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import torch
from torch import nn

# The one block rule (compile, checkpointing and sharding share it), used here by name.
from runner.stack.compiling.blocks import clean_name, find_blocks  # noqa: F401

# Dynamo writes module paths as source expressions: L['self']._modules['model'].blocks[0].attn
_ROOT = re.compile(r"^[LG]\[['\"][^'\"]*['\"]\]")
_ITEM = re.compile(r"\[['\"]?([^'\"\]]+)['\"]?\]")


def normalize_source_path(path: str) -> str:
    """Turn Dynamo's module source (``L['self']._modules['model'].blocks[0]``) into ``model.blocks.0``."""
    path = _ROOT.sub("", path)
    path = path.replace("._modules", "")
    path = _ITEM.sub(r".\1", path)
    return clean_name(path)


def excluded_module_names(model: nn.Module, exclude: Sequence[str]) -> frozenset[str]:
    """Names (relative to ``model``) of every module that an ``exclude`` prefix selects."""
    prefixes = [clean_name(p) for p in exclude if clean_name(p)]
    names = set()
    for raw, _ in model.named_modules():
        name = clean_name(raw)
        below_root = name.partition(".")[2]  # the same name, one wrapper level down
        if name and any(_selects(p, name) or (below_root and _selects(p, below_root)) for p in prefixes):
            names.add(name)
    return frozenset(names)


def _selects(prefix: str, name: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def path_is_excluded(path: str, excluded: frozenset[str]) -> bool:
    """Whether a normalized module path from a compiled graph lies in an excluded module."""
    if not path or not excluded:
        return False
    parts = path.split(".")
    return any(".".join(parts[i:]) in excluded for i in range(len(parts)))


def node_is_excluded(node: torch.fx.Node, excluded: frozenset[str]) -> bool:
    """Whether a saved forward-graph value belongs to an excluded module."""
    if not excluded:
        return False
    for n in (node, *node.users):
        stack = n.meta.get("nn_module_stack") or {}
        for entry in stack.values():
            source = entry[0] if isinstance(entry, tuple) else str(entry)
            if path_is_excluded(normalize_source_path(str(source)), excluded):
                return True
    return False


def wants_packing(x: torch.Tensor, nbytes: int, stored_itemsize: int, min_bytes: int) -> bool:
    """Whether a saved tensor is worth re-encoding."""
    return x.is_floating_point() and x.element_size() > stored_itemsize and nbytes >= min_bytes


def held_storages(tensors: Iterable[torch.Tensor]) -> set[int]:
    """Data pointers of the storages behind ``tensors`` (parameters and buffers: alive anyway, so packing them would
    only add memory)."""
    held = set()
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        storage = local.untyped_storage()
        if storage.nbytes() > 0:
            held.add(storage.data_ptr())
    return held


class ExcludedDepth:
    """How deep the eager forward is inside excluded modules (> 0: saved tensors are kept as they are)."""

    def __init__(self) -> None:
        self.depth = 0

    def attach(self, model: nn.Module, excluded: frozenset[str]) -> None:
        """Hook every module of ``model`` whose name is in ``excluded``."""
        for name, mod in model.named_modules():
            if clean_name(name) in excluded:
                mod.register_forward_pre_hook(self._enter)
                mod.register_forward_hook(self._leave, always_call=True)

    def _enter(self, module: nn.Module, args: object) -> None:
        if not torch.compiler.is_compiling():
            self.depth += 1

    def _leave(self, module: nn.Module, args: object, output: object) -> None:
        if not torch.compiler.is_compiling():
            self.depth = max(0, self.depth - 1)

    def reset(self) -> None:
        self.depth = 0
