"""Which modules are a model's repeated blocks: one rule for compiling (``compile.scope=blocks``), checkpointing
(``offload=checkpoint``) and FSDP sharding, so the three always pick the same modules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from torch import nn

# Path components that wrappers insert and that are not part of a module's user-facing name:
# torch.compile's OptimizedModule and checkpoint_wrapper's inner module.
WRAPPER_PARTS = frozenset({"_orig_mod", "_checkpoint_wrapped_module"})


def clean_name(name: str) -> str:
    """A module name without wrapper components (``blocks.0._checkpoint_wrapped_module`` -> ``blocks.0``)."""
    return ".".join(p for p in name.split(".") if p and p not in WRAPPER_PARTS)


def find_blocks(model: nn.Module, block_types: Iterable[str] = ()) -> list[tuple[str, nn.Module]]:
    """The repeated blocks of ``model`` as ``(name, module)``, names relative to ``model`` without wrapper
    components, each module the outermost wrapper of its block (see the module docstring)."""
    outermost: dict[str, nn.Module] = {}
    for name, mod in model.named_modules():  # parents before children: the first module of a name wins
        outermost.setdefault(clean_name(name), mod)
    types = set(block_types)
    if types:
        found: list[str] = []
        for name, mod in model.named_modules():
            clean = clean_name(name)
            if type(mod).__name__ in types and clean not in found and \
                    not any(clean.startswith(f + ".") for f in found):
                found.append(clean)
        return [(name, outermost[name]) for name in found]
    best: Optional[tuple[str, nn.ModuleList]] = None
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and (best is None or len(mod) > len(best[1])):
            best = (clean_name(name), mod)
    if best is None:
        return []
    prefix = f"{best[0]}." if best[0] else ""
    return [(f"{prefix}{i}", outermost.get(f"{prefix}{i}", child)) for i, child in enumerate(best[1])]
