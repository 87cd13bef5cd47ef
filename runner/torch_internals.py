"""Every version-specific torch internal runner touches, one function each: the bottom layer.

Much of what runner needs from torch.compile is private: counter names, the compilation-metrics
deque, the compile callback registry, cache entries, the graph-break artifact logger, the stance
object, Dynamo/Inductor/functorch config keys, the saved-tensor-hook inlining check, dynamic-shape
marks, the messages of compile errors. Each is reached through exactly one function here, and
``tests/test_torch_internals.py`` pins every one against the installed torch, so a torch upgrade
breaks one named test instead of the product. No other runner module names ``torch._dynamo``,
``torch._inductor``, ``torch._functorch`` or ``torch._logging``.

Process-wide settings go through :class:`TorchSettings`, which records what it found and puts it
back on ``restore()``: Hydra multirun jobs and a user's own code share the process.

Pinned against torch 2.13.0.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sys
import types
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

# (group, name) of each torch counter we read, and the torch module whose source increments it
# (the pin test checks that source, because most counters exist only once something bumped them).
COUNTERS: dict[str, tuple[str, str, str]] = {
    "unique_graphs": ("stats", "unique_graphs", "torch._dynamo.output_graph"),
    "frames_total": ("frames", "total", "torch._dynamo.convert_frame"),
    "frames_ok": ("frames", "ok", "torch._dynamo.convert_frame"),
    "fx_cache_hit": ("inductor", "fxgraph_cache_hit", "torch._inductor.codecache"),
    "fx_cache_miss": ("inductor", "fxgraph_cache_miss", "torch._inductor.codecache"),
    "aot_cache_hit": ("aot_autograd", "autograd_cache_hit", "torch._functorch._aot_autograd.autograd_cache"),
    "aot_cache_miss": ("aot_autograd", "autograd_cache_miss", "torch._functorch._aot_autograd.autograd_cache"),
    "cudagraph_skips": ("inductor", "cudagraph_skips", "torch._inductor.output_code"),
}
GRAPH_BREAK_GROUP = "graph_break"  # counters["graph_break"]: {reason text: times hit while tracing}
RESUME_PREFIX = "torch_dynamo_resume_in_"  # code names Dynamo gives the continuation after a break
_RESUME_RE = re.compile(rf"^{RESUME_PREFIX}(?P<parent>.+)_at_(?P<line>\d+)$")


def counters_snapshot() -> dict[str, dict[str, int]]:
    """A deep copy of ``torch._dynamo.utils.counters`` (group -> name -> count)."""
    from torch._dynamo.utils import counters

    return {group: dict(values) for group, values in counters.items()}


def counter(snapshot: Mapping[str, Mapping[str, int]], key: str) -> int:
    """The value of the counter named ``key`` in :data:`COUNTERS` (0 if torch never bumped it)."""
    group, name, _ = COUNTERS[key]
    return int(snapshot.get(group, {}).get(name, 0))


def counter_now(key: str) -> int:
    """The counter named ``key`` as it stands, read without copying every counter."""
    from torch._dynamo.utils import counters

    return counter(counters, key)  # .get on torch's defaultdict adds no group


def graph_break_counts(snapshot: dict[str, dict[str, int]]) -> dict[str, int]:
    """Graph-break reasons (torch's full text) -> times Dynamo hit them while tracing."""
    return dict(snapshot.get(GRAPH_BREAK_GROUP, {}))


def compilation_metrics() -> list[Any]:
    """Dynamo's per-compile records (``CompilationMetrics``), oldest first."""
    from torch._dynamo.utils import get_compilation_metrics

    return list(get_compilation_metrics())


def compilation_metrics_limit() -> int | None:
    """How many compile records torch keeps (older ones are dropped; default 64)."""
    from torch._dynamo import utils

    return utils._compilation_metrics.maxlen


def set_compilation_metrics_limit(limit: int) -> None:
    """Keep up to ``limit`` compile records (the default 64 loses records in long runs)."""
    from torch._dynamo.utils import set_compilation_metrics_limit as _set

    _set(limit)


def keep_compilation_metrics(limit: int) -> None:
    """Keep at least ``limit`` compile records (never lowers a limit someone else raised)."""
    current = compilation_metrics_limit()
    if current is not None and current < limit:
        set_compilation_metrics_limit(limit)


def graphs_compiled() -> int:
    """Dynamo graphs compiled in this process so far (one counter read: cheap enough per step)."""
    from torch._dynamo.utils import counters

    group, name, _ = COUNTERS["unique_graphs"]
    return int(counters[group][name])


@dataclass(frozen=True)
class CompileRecord:
    """The fields of one ``CompilationMetrics`` that telemetry uses, under stable names."""

    compile_id: str  # "frame/attempt", e.g. "0/2" = third compile of the first frame
    is_forward: bool  # False: the deferred (lazy) backward compile of a forward graph
    co_name: str | None
    co_filename: str | None
    co_firstlineno: int | None
    guard_count: int | None  # guards offered to the guard manager (before guard_filter_fn)
    total_s: float  # whole compile of this record (Dynamo + backend; backward: AOT + Inductor)
    backend_s: float  # AOTAutograd including Inductor (forward), 0 for backward records
    inductor_s: float  # Inductor only (0 for the eager/aot_eager backends)
    recompile_reason: str | None  # the failed guard that caused this compile
    restart_reasons: tuple[str, ...]  # graph-break reasons hit while tracing this frame
    fail_type: str | None  # set when the compile failed and the frame ran eagerly
    fail_reason: str | None
    cudagraph_skip_reason: str | None
    start_us: int | None  # wall clock (time.time_ns() // 1000) when this compile started


def _us(value: int | None) -> float:
    return (value or 0) / 1e6


def to_record(metrics: Any) -> CompileRecord:
    """Convert one ``CompilationMetrics`` (torch 2.13 field names) to a :class:`CompileRecord`."""
    forward = metrics.is_forward is not False
    if forward:
        total = _us(metrics.dynamo_cumulative_compile_time_us)
        backend = _us(metrics.aot_autograd_cumulative_compile_time_us)
    else:  # the backward record carries only its own cumulative time
        total, backend = _us(metrics.backward_cumulative_compile_time_us), 0.0
    return CompileRecord(
        compile_id=str(metrics.compile_id),
        is_forward=forward,
        co_name=metrics.co_name,
        co_filename=metrics.co_filename,
        co_firstlineno=metrics.co_firstlineno,
        guard_count=metrics.guard_count,
        total_s=total,
        backend_s=backend,
        inductor_s=_us(metrics.inductor_cumulative_compile_time_us),
        recompile_reason=metrics.recompile_reason,
        restart_reasons=tuple(sorted(metrics.restart_reasons or ())),
        fail_type=metrics.fail_type,
        fail_reason=metrics.fail_reason,
        cudagraph_skip_reason=metrics.cudagraph_skip_reason,
        start_us=metrics.start_time_us,
    )


def resume_parent(co_name: str | None) -> str | None:
    """For a graph-break continuation (``torch_dynamo_resume_in_f_at_16``), the frame it continues."""
    match = _RESUME_RE.match(co_name or "")
    return match.group("parent") if match else None


CompileCallback = Callable[[str, str], None]
"""Called with (trigger, compile_id); trigger is "DYNAMO", "LAZY_BACKWARD", "CUDAGRAPH_RECORDING"..."""


def register_compile_callbacks(on_start: CompileCallback, on_end: CompileCallback) -> Callable[[], None]:
    """Call ``on_start``/``on_end`` around every compile (also the deferred backward compile).

    torch runs them only for the outermost of nested compiles. Returns a function that unregisters.
    """
    handler = torch._dynamo.callback_handler

    def start(args: Any) -> None:
        on_start(args.callback_trigger.name, str(args.compile_id))

    def end(args: Any) -> None:
        on_end(args.callback_trigger.name, str(args.compile_id))

    handler.register_start_callback(start)
    handler.register_end_callback(end)

    def remove() -> None:
        # remove_* raise ValueError when torch._dynamo.reset() already cleared the registry
        for remover, fn in ((handler.remove_start_callback, start), (handler.remove_end_callback, end)):
            with contextlib.suppress(ValueError):
                remover(fn)

    return remove


def compiling_target() -> tuple[str, str, int] | None:
    """(name, file, first line) of what Dynamo is compiling now, from inside a compile start callback.

    torch passes only a compile id to callbacks; the code object is an argument of
    ``convert_frame._compile``, found by walking the stack. For a compiled ``nn.Module`` Dynamo
    compiles torch's own ``wrap_inline`` wrapper, so the wrapped module (its closure cell ``fn``) is
    named instead: ``Sequential.forward (models.py:12)``. None when called anywhere else.
    """
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and not (
        frame.f_code.co_name == "_compile" and isinstance(frame.f_locals.get("code"), types.CodeType)
    ):
        frame = frame.f_back
    if frame is None:
        return None
    code: types.CodeType = frame.f_locals["code"]
    closure = frame.f_locals.get("closure")
    if code.co_filename.startswith(_TORCH_DIR) and closure and "fn" in code.co_freevars:
        try:
            fn = closure[code.co_freevars.index("fn")].cell_contents
            target = fn.forward if isinstance(fn, torch.nn.Module) else fn
            inner = getattr(getattr(target, "__func__", target), "__code__", None)
            if inner is not None:
                owner = f"{type(fn).__name__}." if isinstance(fn, torch.nn.Module) else ""
                return f"{owner}{inner.co_name}", inner.co_filename, inner.co_firstlineno
        except (ValueError, IndexError, AttributeError):  # an empty cell or an unusual wrapper
            pass
    return code.co_name, code.co_filename, code.co_firstlineno


_TORCH_DIR = os.path.dirname(torch.__file__)


def _count_leaf_guards(manager: Any) -> int:
    return len(manager.get_leaf_guards()) + sum(_count_leaf_guards(c) for c in manager.get_child_managers())


def live_guard_counts() -> dict[str, list[int]]:
    """Leaf guards installed per live cache entry, keyed by ``"name (file:line)"`` of the code.

    Reads Dynamo's tracker of every code object it has seen and each one's cache entries; counts
    what is actually checked at run time (after ``guard_filter_fn``). Empty after ``torch._dynamo.reset()``.
    """
    from torch._dynamo.convert_frame import input_codes
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    counts: dict[str, list[int]] = {}
    for ref in list(input_codes.seen):
        code = ref()
        if code is None:
            continue
        entries = _debug_get_cache_entry_list(code)
        if entries:
            key = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
            counts[key] = [_count_leaf_guards(e.guard_manager.root) for e in entries]
    return counts


def graph_break_logger() -> logging.Logger:
    """The artifact logger Dynamo writes each graph break to, with the user file and line.

    Raising only this logger to DEBUG (instead of ``torch._logging.set_logs(graph_breaks=True)``)
    captures graph-break locations without printing them to stderr or resetting the user's
    ``TORCH_LOGS`` configuration. Messages contain ``in user code at FILE:LINE`` and
    ``Graph Break Reason: ...``.
    """
    from torch._dynamo import symbolic_convert

    return symbolic_convert.graph_break_log


def force_eager_stance() -> Any:
    """Switch Dynamo to the ``force_eager`` stance; returns the prior stance for :func:`restore_stance`.

    Keeping the prior stance object (not just its name) restores ``fail_on_recompile`` etc. exactly.
    """
    from torch._dynamo import eval_frame

    return eval_frame._set_stance(eval_frame.DynamoStance(stance="force_eager"))


def restore_stance(prior: Any) -> None:
    """Restore a stance returned by :func:`force_eager_stance`."""
    from torch._dynamo import eval_frame

    eval_frame._set_stance(prior)


def current_stance() -> str:
    """The name of Dynamo's current stance (``default``, ``force_eager``, ``fail_on_recompile``...)."""
    from torch._dynamo import eval_frame

    return str(eval_frame._stance.stance)


def step_stance(stance: str) -> contextlib.AbstractContextManager[Any]:
    """``torch.compiler.set_stance(stance)`` around one step, unless Dynamo is already forced eager.

    The speedup meter forces eager steps from a callback, outside the step; a stance set inside the
    step (``dynamic.after_warmup``, CUDA-graph warm-up) would otherwise turn them back into compiled
    steps (a speedup of compiled vs compiled), or make them recompile. An eager step compiles nothing,
    so no other stance has anything to do in it.
    """
    if current_stance() == "force_eager":
        return contextlib.nullcontext()
    return torch.compiler.set_stance(stance)


# -- process-wide settings, restored -----------------------------------------------------------
_MISSING = object()
MANAGED: dict[str, Callable[[], Any]] = {}
"""Every process-wide setting any ``TorchSettings`` ever changed, with a reader of its current value
(what the no-leak test compares before and after runs)."""


def _config_module(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


class TorchSettings:
    """Process-wide torch settings changed by one owner, each put back by :meth:`restore`.

    Only the first change of a key records its prior value, so setting a key twice still restores
    what was there before the owner touched it. ``restore`` runs in reverse order and is idempotent.
    """

    def __init__(self) -> None:
        self._undo: dict[str, Callable[[], None]] = {}

    def _config(self, module: str, key: str, value: Any) -> None:
        mod = _config_module(module)
        *parents, leaf = key.split(".")
        obj = mod
        for part in parents:
            obj = getattr(obj, part)
        name = f"{module}.{key}"
        if name not in self._undo:
            prior = getattr(obj, leaf)
            self._undo[name] = lambda: setattr(obj, leaf, prior)
        MANAGED.setdefault(name, lambda: getattr(obj, leaf))
        setattr(obj, leaf, value)

    def dynamo(self, key: str, value: Any) -> None:
        """``torch._dynamo.config.<key> = value`` (e.g. recompile_limit, trace_autograd_ops)."""
        self._config("torch._dynamo.config", key, value)

    def inductor(self, key: str, value: Any) -> None:
        """``torch._inductor.config.<key> = value``; dotted keys reach sub-configs (``triton.cudagraphs``)."""
        self._config("torch._inductor.config", key, value)

    def functorch(self, key: str, value: Any) -> None:
        """``torch._functorch.config.<key> = value`` (e.g. activation_memory_budget)."""
        self._config("torch._functorch.config", key, value)

    def env(self, key: str, value: str | None) -> None:
        """Set (or, with None, unset) an environment variable torch reads, e.g. TORCHINDUCTOR_CACHE_DIR."""
        name = f"env.{key}"
        if name not in self._undo:
            prior = os.environ.get(key)
            self._undo[name] = lambda: _set_env(key, prior)
        MANAGED.setdefault(name, lambda: os.environ.get(key))
        _set_env(key, value)

    def guard_collectives(self, enabled: bool) -> None:
        """``torch.compiler.set_enable_guard_collectives`` (returns the prior setting, which we keep)."""
        prior = torch.compiler.set_enable_guard_collectives(enabled)
        self._undo.setdefault("guard_collectives", lambda: torch.compiler.set_enable_guard_collectives(prior))
        MANAGED.setdefault("guard_collectives", _guard_collectives_enabled)

    def compilation_metrics_limit(self, at_least: int) -> None:
        """Keep at least ``at_least`` compile records (torch's default, 64, loses a long run's)."""
        current = compilation_metrics_limit()
        if current is None or current >= at_least:
            return
        self._undo.setdefault("compilation_metrics_limit", lambda: set_compilation_metrics_limit(current))
        MANAGED.setdefault("compilation_metrics_limit", compilation_metrics_limit)
        set_compilation_metrics_limit(at_least)

    def restore(self) -> None:
        """Put back every setting this owner changed, newest first."""
        for undo in reversed(list(self._undo.values())):
            undo()
        self._undo.clear()


def _set_env(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


def _guard_collectives_enabled() -> bool:
    from torch._C._dynamo.eval_frame import set_guard_complete_hook

    prior = set_guard_complete_hook(None)
    set_guard_complete_hook(prior)
    return prior is not None


def managed_settings() -> dict[str, Any]:
    """The current value of every setting in :data:`MANAGED` (for the no-leak test and debugging)."""
    return {name: read() for name, read in sorted(MANAGED.items())}


def reset_compiler() -> None:
    """Forget every compiled frame, guard and automatic-dynamic decision of this process.

    Hydra multirun jobs share one process, and Dynamo's caches are keyed by code object (every job's
    ``training_step`` is the same one). Note: this also clears compile callbacks registered before.
    """
    torch.compiler.reset()


# -- compile errors and stances ----------------------------------------------------------------
# The prefix of the RuntimeError torch raises under set_stance("fail_on_recompile") (torch/_dynamo/eval_frame.py).
FAIL_ON_RECOMPILE_PREFIX = "Detected recompile when torch.compile stance is 'fail_on_recompile'"
CONVERT_FRAME_LOGGER = "torch._dynamo.convert_frame"
"""The logger Dynamo warns on when it gives up on a frame (recompile limit, suppressed errors)."""


def is_fail_on_recompile(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's refusal to recompile under the ``fail_on_recompile`` stance."""
    return isinstance(exc, RuntimeError) and str(exc).startswith(FAIL_ON_RECOMPILE_PREFIX)


def compile_error_kind(exc: BaseException) -> str | None:
    """What kind of compile error ``exc`` is: ``recompile_limit``, ``fail_on_recompile``,
    ``constraint``, ``backend``, ``unsupported``, ``dynamo``; None when it is no compile error."""
    from torch._dynamo import exc as exc_mod
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    if isinstance(exc, exc_mod.FailOnRecompileLimitHit):
        return "recompile_limit"
    if isinstance(exc, ConstraintViolationError):
        return "constraint"
    if isinstance(exc, exc_mod.BackendCompilerFailed):
        return "backend"
    if isinstance(exc, exc_mod.Unsupported):
        return "unsupported"
    if isinstance(exc, exc_mod.TorchDynamoException):
        return "dynamo"
    if isinstance(exc, RuntimeError) and "torch.compile stance is 'fail_on_recompile'" in str(exc):
        return "fail_on_recompile"
    return None


def backend_name(exc: BaseException) -> str:
    """The backend a ``BackendCompilerFailed`` names, and its inner exception's text."""
    return str(getattr(exc, "backend_name", "?"))


def inner_exception(exc: BaseException) -> BaseException:
    """The backend's own exception inside a ``BackendCompilerFailed``."""
    inner = getattr(exc, "inner_exception", None)
    return inner if isinstance(inner, BaseException) else exc


def graph_break_type(exc: BaseException) -> str | None:
    """The graph-break type torch gives an ``Unsupported`` error (``gb_type``)."""
    return getattr(exc, "gb_type", None)


def limit_hit_from_record(record: logging.LogRecord) -> dict[str, str] | None:
    """``torch._dynamo hit config.recompile_limit`` warning -> {limit, function, reason}."""
    if not str(record.msg).startswith("torch._dynamo hit config.") or len(record.args or ()) < 4:
        return None
    limit_type, limit, function, reason = tuple(record.args)[:4]  # type: ignore[arg-type]
    return {"limit": f"{limit_type}={limit}", "function": str(function), "reason": str(reason)}


def fallback_from_record(record: logging.LogRecord) -> dict[str, str] | None:
    """Dynamo's ``WON'T CONVERT <fn> <file> line <n> due to: ...`` warning (suppress_errors)."""
    text = record.getMessage()
    m = re.match(r"WON'T CONVERT (\S+) (\S+) line (\d+)", text)
    if m is None:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Unsupported|Failed)\b.*:", ln)]
    reason = errors[-1] if errors else lines[-1]
    return {"function": f"'{m[1]}' ({m[2]}:{m[3]})", "reason": reason[:300]}


def frame_of(exc: BaseException) -> str | None:
    """The frame torch was compiling (name, file:line) and the user line that failed, if known."""
    code = None
    compile_id = str(getattr(exc, "compile_id", "") or "")
    if compile_id:
        for m in reversed(compilation_metrics()):
            if str(getattr(m, "compile_id", "")) == compile_id:
                code = f"'{m.co_name}' ({m.co_filename}:{m.co_firstlineno})"
                break
    user = getattr(exc, "innermost_user_frame_summary", None)
    if user is None and getattr(exc, "real_stack", None):
        user = exc.real_stack[-1]  # type: ignore[attr-defined]
    at = f"{user.filename}:{user.lineno} in {user.name}" + (f" `{user.line.strip()}`" if user.line else "") \
        if user is not None else None
    if code and at:
        return f"frame {code}, at {at}"
    return f"frame {code}" if code else (f"at {at}" if at else None)


# -- dynamic shapes ------------------------------------------------------------------------------
def mark_dynamic(t: torch.Tensor, dim: int, min: int, max: int | None) -> None:
    """``mark_dynamic`` with bounds. torch 2.13 fails on a lower bound alone (``AssertionError: not
    simple sympy type <class 'NoneType'>`` in value_ranges), so "no upper bound" is passed as a huge int."""
    torch._dynamo.mark_dynamic(t, dim, min=min, max=sys.maxsize - 1 if max is None else max)


def mark_unbacked(t: torch.Tensor, dim: int, min: int, max: int | None, shape_id: str) -> None:
    """``mark_unbacked`` with bounds. A lower bound of at least 2 matters: without it causal SDPA
    cannot decide ``Eq(u0, 0)``, graph-breaks and falls back to eager (torch 2.13). torch 2.11's
    ``mark_unbacked`` takes no bounds: the dim is marked without them (:func:`unbacked_bounds_unsupported`)."""
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


# -- compiled autograd ------------------------------------------------------------------------------
def compiled_autograd(compiler: Callable[..., Any]) -> contextlib.AbstractContextManager[Any]:
    """Run ``backward()`` calls inside through compiled autograd with ``compiler`` (a torch.compile)."""
    return torch._dynamo.compiled_autograd._enable(compiler)


# -- saved-tensor hooks traced into the graph -----------------------------------------------------
# Saved-tensor hooks given as ``torch.fx.GraphModule`` objects are inlined by AOTAutograd into the
# forward epilogue (pack) and the backward prologue (unpack) of each compiled graph
# (``torch/_functorch/_aot_autograd/graph_compile.py``: ``maybe_inline_graph_saved_tensors_hooks``).
# While a hook is being traced there, a private thread-local context exposes the forward-graph node
# being saved, which is how a traced pack hook learns which module a saved tensor belongs to.
def traced_saved_node() -> Any:
    """The forward-graph node (``torch.fx.Node``) whose saved value a traced pack hook is packing,
    else ``None`` (the hook runs eagerly, on real tensors)."""
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
    """Mark a hook-graph call (``torch.fx.Node``) as an ``fx.wrap`` leaf with a user cache hash.

    AOTAutograd's cache bypasses graphs that call unknown Python functions unless the call is an
    ``fx.wrap`` leaf carrying ``user_cache_hash`` (``autograd_cache.check_node_safe``); the hash must
    change whenever what the function traces to changes.
    """
    node.meta["is_wrapped"] = True
    node.meta["user_cache_hash"] = cache_hash


def memory_budget() -> float:
    """The partitioner's ``activation_memory_budget`` (1.0, torch's default, saves everything)."""
    return float(torch._functorch.config.activation_memory_budget)


# -- CUDA-graph trees ----------------------------------------------------------------------------
def cudagraph_tree_state(device_index: int) -> str | None:
    """What Inductor's CUDA-graph tree on ``device_index`` did last in this thread: ``NONE``,
    ``WARMUP``, ``RECORDING`` or ``EXECUTION`` (a replay); None when no tree exists there.
    (``torch._inductor.cudagraph_trees``: ``get_manager(...).path_state``.)"""
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.get_manager(device_index, create_if_none_exists=False)
    return None if manager is None else str(manager.path_state.name)


CUDAGRAPH_RECORDING_TRIGGER = "CUDAGRAPH_RECORDING"
"""The compile-callback trigger torch reports while a CUDA graph is recorded (``CallbackTrigger``)."""


# -- Python state read inside a compiled step --------------------------------------------------------
def local_source_pattern(local: str, attributes: str = "") -> str:
    """A ``dynamic_sources`` regex for what Dynamo names frame local ``local`` (``L['self']``), then
    ``attributes`` (a regex for the attribute path below it, e.g. ``r"\\._trainer\\.fit_loop\\..*"``)."""
    return re.escape(f"L['{local}']") + attributes


def add_dynamic_sources(settings: TorchSettings, patterns: list[str]) -> None:
    """Ints (and tensors) whose Dynamo source name matches one of ``patterns`` are dynamic from their
    first compile: ``torch.compiler.config.dynamic_sources``, kept with what was set before.

    A matching int becomes a graph input (a backed SymInt, not specialised on 0/1) instead of a
    constant guarded with ``==``: Dynamo specialises every int reached through an ``nn.Module``
    (``is_int_specialization_case``), so ``self.global_step`` would recompile every step.
    """
    prior = str(_config_module("torch.compiler.config").dynamic_sources)
    entries = [p for p in prior.split(",") if p] + [p for p in patterns if p not in prior.split(",")]
    settings._config("torch.compiler.config", "dynamic_sources", ",".join(entries))


# -- structured trace (TORCH_TRACE) ------------------------------------------------------------
def _interned(text: str, index: int) -> Callable[[], tuple[str, int]]:
    return lambda: (text, index)


def start_structured_trace(directory: str) -> Callable[[], str | None]:
    """Write torch's structured compile trace (what ``TORCH_TRACE=<dir>`` writes, tlparse's input) into
    ``directory`` from now on; returns ``stop``, which detaches it, puts the trace logger back as found
    and returns the trace file's path (None when nothing was compiled, so nothing was written).

    ``TORCH_TRACE`` is read once, when torch is imported; a run that starts tracing later attaches
    torch's own lazy trace handler to torch's trace logger (``torch._logging._internal.trace_log``)."""
    from torch._logging import _internal as logs

    trace_log = logs.trace_log
    handler = logs.LazyTraceHandler(directory)
    handler.setFormatter(logs.TorchLogsFormatter(trace=True))
    prior_level, prior_propagate = trace_log.level, trace_log.propagate
    trace_log.setLevel(logging.DEBUG)
    trace_log.propagate = False
    trace_log.addHandler(handler)
    # torch writes each source file name into the trace once per process (an interned "str" record); a
    # trace started after earlier compiles (a tune's trials, a sweep in one process) would lack them and
    # tlparse would show "(unknown)" files: replay the table into the new trace (the same ids).
    from torch._logging import structured

    for text, index in list(structured.INTERN_TABLE.items()):
        logs.trace_structured("str", _interned(text, index), suppress_context=True)

    def stop() -> str | None:
        # torch 2.13+ keeps the path in _stream_path; torch 2.11 has only the open file's name.
        path = getattr(handler, "_stream_path", None) or getattr(handler.stream, "name", None)
        trace_log.removeHandler(handler)
        handler.close()
        trace_log.setLevel(prior_level)
        trace_log.propagate = prior_propagate
        return path

    return stop


# -- forgetting a fit's compiled frames ---------------------------------------------------------------
CodeSnapshot = dict[int, int]
"""``id(code) -> cache entries`` of every code object Dynamo has seen (see :func:`code_snapshot`)."""


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
    """Drop every compiled entry of ``codes`` and their automatic-dynamic history, and nothing else.

    Dynamo keys its caches by code object: an inherited ``training_step`` (or one module class fitted
    again) keeps adding entries fit after fit until ``recompile_limit`` refuses it, and a dimension
    that varied in one fit starts the next one dynamic. ``torch._dynamo.reset()`` would forget every
    other compiled function of the process too (and the compile callbacks registered with it)."""
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


def lift_python_scalars(settings: TorchSettings) -> None:
    """Python numbers a compiled frame reads stop specialising it after they change once.

    ``allow_unspec_int_on_nn_module``: an int attribute of an ``nn.Module`` (a LightningModule's
    ``self.training_step_invoked += 1``) is a guarded constant by default (``== 7``), recompiling
    every step; allowed, it goes through automatic dynamic like any other int: one recompile when it
    first changes, then a graph input. ``specialize_float`` (the ``dynamic`` group's, set by the shape
    policy) does the same for floats (a learning rate read in the step).

    ``capture_scalar_outputs``: ``loss.item()`` / ``float(loss)`` in the step (a loss history; torch's
    own BatchNorm under SWA's cumulative average) stays in the graph as a scalar output instead of a graph
    break whose continuation then specialises on the value; the host read happens where eager has it."""
    settings.dynamo("allow_unspec_int_on_nn_module", True)
    settings.dynamo("capture_scalar_outputs", True)


# -- compiling beside the run (compile.background) ---------------------------------------------
def load_inductor() -> None:
    """Import Inductor's compiler (``torch._inductor.compile_fx``), which torch loads at the first compile."""
    import torch._inductor.compile_fx  # noqa: F401


def clear_inductor_memory_caches() -> None:
    """Empty Inductor's in-process caches of loaded kernels and graphs (``torch._inductor.utils.clear_caches``):
    the next compile reads its on-disk cache as a fresh process would."""
    from torch._inductor.utils import clear_caches

    clear_caches()


# -- the CPU instruction set in compile caches ---------------------------------------------------------
def cpu_capability() -> str:
    """The instruction set ATen's CPU kernels use here (``AVX512``, ``AVX2``...; ``ATEN_CPU_CAPABILITY``
    overrides it)."""
    return str(torch.backends.cpu.get_cpu_capability())


def machine_cache_dir(directory: str) -> str:
    """``directory`` keyed by the CPU instruction set. Inductor's on-disk cache key does not cover it: a
    cache filled with AVX-512 code and read with the AVX2 path gave NaN losses from the first step (torch
    2.13, measured 2026-11-24), which a cache directory shared between machines would hit."""
    return os.path.join(directory, f"cpu-{cpu_capability().lower()}")
