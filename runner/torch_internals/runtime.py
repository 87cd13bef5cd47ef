"""What runner does to compiled code at run time: stances, shape marks, compiled autograd, traced saved-tensor hooks,
forgetting or skipping frames, Inductor's caches."""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch


def stance_now() -> Any:
    """Dynamo's current stance, as an object :func:`restore_stance` puts back exactly (not just its name)."""
    from torch._dynamo import eval_frame

    return eval_frame._stance


def set_stance(stance: str) -> Any:
    """Switch Dynamo to ``stance`` (``force_eager``, ``fail_on_recompile``, ...); returns the prior stance."""
    from torch._dynamo import eval_frame

    return eval_frame._set_stance(eval_frame.DynamoStance(stance=stance))


def restore_stance(prior: Any) -> None:
    """Put back a stance returned by :func:`stance_now` or :func:`set_stance`."""
    from torch._dynamo import eval_frame

    eval_frame._set_stance(prior)


def current_stance() -> str:
    """The name of Dynamo's current stance (``default``, ``force_eager``, ``fail_on_recompile``...)."""
    from torch._dynamo import eval_frame

    return str(eval_frame._stance.stance)


def reset_compiler() -> None:
    """Forget every compiled frame, guard and dynamic decision of this process (multirun jobs share it)."""
    torch.compiler.reset()


def mark_dynamic(t: torch.Tensor, dim: int, min: int, max: int | None) -> None:
    """``mark_dynamic`` with bounds."""
    # torch 2.13 fails on a lower bound alone ("not simple sympy type NoneType" in value_ranges): a huge int instead.
    torch._dynamo.mark_dynamic(t, dim, min=min, max=sys.maxsize - 1 if max is None else max)


def mark_unbacked(t: torch.Tensor, dim: int, min: int, max: int | None, shape_id: str) -> None:
    """``mark_unbacked`` with bounds; torch 2.11 takes none, so the dim is marked without them."""
    why = unbacked_bounds_unsupported()
    if why is None:
        torch._dynamo.decorators.mark_unbacked(t, dim, min=min, max=max, shape_id=shape_id)
        return
    warnings.warn(f"{why}; causal attention may graph-break (dynamic=dynamic avoids it)", stacklevel=2)
    torch._dynamo.decorators.mark_unbacked(t, dim, shape_id=shape_id)


@functools.cache
def unbacked_bounds_unsupported() -> str | None:
    """Why this torch's ``mark_unbacked`` cannot bound an unbacked size, or None when it can."""
    import inspect

    if "min" in inspect.signature(torch._dynamo.decorators.mark_unbacked).parameters:
        return None
    return (f"torch {torch.__version__}'s mark_unbacked takes no min/max (torch 2.13 has them): "
            "dynamic.min and dynamic.max are not enforced on unbacked sizes")


def maybe_mark_dynamic(t: torch.Tensor, dim: int) -> None:
    """``torch._dynamo.maybe_mark_dynamic``: a hint that ``dim`` varies (no error if it specialises)."""
    torch._dynamo.maybe_mark_dynamic(t, dim)


def mark_static_address(t: torch.Tensor) -> None:
    """``torch._dynamo.mark_static_address``: the tensor never moves (CUDA graphs read it in place)."""
    torch._dynamo.mark_static_address(t)


_NO_MARK = object()
# The tensor attributes torch._dynamo.decorators' shape marks set (mark_static_address sets another).
SHAPE_MARKS = ("_dynamo_dynamic_indices", "_dynamo_dynamic_range", "_dynamo_weak_dynamic_indices",
               "_dynamo_unbacked_indices", "_dynamo_unbacked_bounds", "_dynamo_strict_unbacked_indices",
               "_dynamo_static_indices", "_dynamo_shape_ids", "_dynamo_hint_overrides", "_specialize_on",
               "_has_dynamo_dim_marking")


def copy_shape_marks(source: torch.Tensor, target: torch.Tensor) -> None:
    """``target`` carries exactly ``source``'s shape marks, so a static buffer compiles as the batch it stands for."""
    for name in SHAPE_MARKS:
        value = vars(source).get(name, _NO_MARK)
        if value is not _NO_MARK:
            setattr(target, name, copy.copy(value))
        elif name in vars(target):
            delattr(target, name)


def compiled_autograd(compiler: Callable[..., Any]) -> contextlib.AbstractContextManager[Any]:
    """Run ``backward()`` calls inside through compiled autograd with ``compiler`` (a torch.compile)."""
    return torch._dynamo.compiled_autograd._enable(compiler)


# AOTAutograd inlines GraphModule saved-tensor hooks into each compiled graph (graph_compile.py:
# maybe_inline_graph_saved_tensors_hooks); while tracing one, a private context exposes the node being saved.
def traced_saved_node() -> Any:
    """The forward-graph node whose saved value a traced pack hook is packing, else None (an eager hook)."""
    import torch.fx
    from torch._functorch._aot_autograd import graph_compile

    state: dict[str, Any] | None = graph_compile._get_saved_tensor_hook_context()
    if not state:
        return None
    node = state.get("_node")
    return node if isinstance(node, torch.fx.Node) else None


def hooks_are_inlineable(pack: Any, unpack: Any) -> bool:
    """Whether AOTAutograd would trace this hook pair into compiled graphs (both GraphModules)."""
    from torch._functorch._aot_autograd import utils

    return bool(utils.saved_tensors_hooks_are_inlineable((pack, unpack)))


def mark_wrapped(node: Any, cache_hash: str) -> None:
    """Mark a hook-graph call as an ``fx.wrap`` leaf with a user cache hash (else AOTAutograd's cache bypasses it)."""
    node.meta["is_wrapped"] = True
    node.meta["user_cache_hash"] = cache_hash


def memory_budget() -> float:
    """The partitioner's ``activation_memory_budget`` (1.0, torch's default, saves everything)."""
    return float(torch._functorch.config.activation_memory_budget)


CodeSnapshot = dict[int, int]  # id(code) -> cache entries of every code object Dynamo has seen


def _seen_codes() -> list[types.CodeType]:
    from torch._dynamo.convert_frame import input_codes

    return [code for ref in list(input_codes.seen) if (code := ref()) is not None]


def code_snapshot() -> CodeSnapshot:
    """How many compiled entries each code object Dynamo has seen holds now."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return {id(code): len(_debug_get_cache_entry_list(code)) for code in _seen_codes()}


def codes_compiled_since(snapshot: CodeSnapshot) -> list[types.CodeType]:
    """Code objects that gained compiled entries since ``snapshot`` (new ones included)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return [code for code in _seen_codes() if len(_debug_get_cache_entry_list(code)) > snapshot.get(id(code), 0)]


def forget_codes(codes: list[types.CodeType]) -> None:
    """Drop the compiled entries and automatic-dynamic history of ``codes`` only (a step fitted again would pile up
    entries until ``recompile_limit``; ``torch._dynamo.reset()`` forgets the whole process)."""
    from torch._dynamo import pgo
    from torch._dynamo.eval_frame import reset_code

    keys = {(c.co_filename, c.co_firstlineno, c.co_name) for c in codes}
    for code in codes:
        reset_code(code)
    state = pgo._CODE_STATE
    if state:
        for code_id in [k for k in state if (k.filename, k.firstlineno, k.name) in keys]:
            del state[code_id]


def find_code(filename: str | None, firstlineno: int | None, name: str | None) -> types.CodeType | None:
    """The code object Dynamo compiled at ``filename:firstlineno`` named ``name`` (None if unseen)."""
    for code in _seen_codes():
        if (code.co_filename, code.co_firstlineno, code.co_name) == (filename, firstlineno, name):
            return code
    return None


def run_code_eagerly(code: types.CodeType) -> Callable[[], None]:
    """From now on Dynamo skips frames of ``code`` (they run eagerly); returns the undo."""
    from torch._dynamo.eval_frame import set_code_exec_strategy
    from torch._dynamo.types import FrameAction, FrameExecStrategy

    set_code_exec_strategy(code, FrameExecStrategy(FrameAction.SKIP, FrameAction.DEFAULT))
    return lambda: set_code_exec_strategy(code, FrameExecStrategy(FrameAction.DEFAULT, FrameAction.DEFAULT))


def load_inductor() -> None:
    """Import Inductor's compiler (``torch._inductor.compile_fx``), which torch loads at the first compile."""
    import torch._inductor.compile_fx  # noqa: F401


def clear_inductor_memory_caches() -> None:
    """Empty Inductor's in-process caches, so the next compile reads the disk cache as a fresh process would."""
    from torch._inductor.utils import clear_caches

    clear_caches()


def tree_leaves(tree: Any) -> list[Any]:
    """Every leaf of a nested batch (``torch.utils._pytree.tree_leaves``)."""
    return list(torch.utils._pytree.tree_leaves(tree))


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """A nested batch with ``fn`` applied to every leaf (``torch.utils._pytree.tree_map``)."""
    return torch.utils._pytree.tree_map(fn, tree)


def fused_kernel_devices() -> list[str]:
    """Device types that have torch's fused optimizer kernels (``_get_fused_kernels_supported_devices``)."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    return list(_get_fused_kernels_supported_devices())


def skip_update_on(optimizer: Any, found_inf: torch.Tensor | None) -> None:
    """Have the fused optimizer skip its update where ``found_inf`` holds 1 (``GradScaler``'s flag); None: never."""
    optimizer.found_inf = found_inf


def zero_in_place(tensors: list[torch.Tensor]) -> None:
    """Zero every tensor in place, one foreach kernel (``torch._foreach_zero_``): their addresses stay."""
    torch._foreach_zero_(tensors)
