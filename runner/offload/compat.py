"""The torch internals the offload package relies on, each behind one function.

Saved-tensor hooks given as ``torch.fx.GraphModule`` objects are inlined by AOTAutograd into the
forward epilogue (pack) and the backward prologue (unpack) of each compiled graph
(``torch/_functorch/_aot_autograd/graph_compile.py``: ``maybe_inline_graph_saved_tensors_hooks``).
While a hook is being traced there, a private thread-local context exposes the forward-graph node
being saved, which is how a traced pack hook learns which module a saved tensor belongs to. These
names are private and may move on a torch upgrade: ``tests/test_offload_policy.py`` pins them, so
an upgrade breaks one test, not the product.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.fx


def traced_saved_node() -> Optional[torch.fx.Node]:
    """The forward-graph node whose saved value a traced pack hook is packing, else ``None``.

    ``None`` means the hook runs eagerly (plain autograd, or a compiled region that could not inline
    the hooks), on real tensors.
    """
    from torch._functorch._aot_autograd import graph_compile

    state: Optional[dict[str, Any]] = graph_compile._get_saved_tensor_hook_context()
    if not state:
        return None
    node = state.get("_node")
    return node if isinstance(node, torch.fx.Node) else None


def hooks_are_inlineable(pack: Any, unpack: Any) -> bool:
    """Whether AOTAutograd would trace this hook pair into compiled graphs (both GraphModules)."""
    from torch._functorch._aot_autograd import utils

    return bool(utils.saved_tensors_hooks_are_inlineable((pack, unpack)))


def mark_wrapped(node: torch.fx.Node, cache_hash: str) -> None:
    """Mark a hook-graph call as an ``fx.wrap`` leaf with a user cache hash.

    AOTAutograd's cache bypasses graphs that call unknown Python functions unless the call is an
    ``fx.wrap`` leaf carrying ``user_cache_hash`` (``autograd_cache.check_node_safe``); the hash must
    change whenever what the function traces to changes.
    """
    node.meta["is_wrapped"] = True
    node.meta["user_cache_hash"] = cache_hash


def set_memory_budget(budget: Optional[float]) -> Optional[float]:
    """Set ``torch._functorch.config.activation_memory_budget``; return the previous value.

    ``None`` restores torch's default (1.0: save everything the partitioner would save).
    """
    cfg = torch._functorch.config
    previous = float(cfg.activation_memory_budget)
    cfg.activation_memory_budget = 1.0 if budget is None else float(budget)
    return previous


def get_memory_budget() -> float:
    """The current ``activation_memory_budget`` (1.0 is torch's default)."""
    return float(torch._functorch.config.activation_memory_budget)
