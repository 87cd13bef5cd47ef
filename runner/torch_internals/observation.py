"""What torch.compile did and is doing, read from torch's own records: counters, compile records, live guards,
the graph-break log, CUDA-graph trees, profiled kernels, compile events as they happen, the structured trace."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import types
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
    return counter_now("unique_graphs")


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
    same = ("co_name", "co_filename", "co_firstlineno", "guard_count", "recompile_reason", "fail_type", "fail_reason",
            "cudagraph_skip_reason")  # CompileRecord's fields that CompilationMetrics has under the same name
    return CompileRecord(
        compile_id=str(metrics.compile_id), is_forward=forward, total_s=total, backend_s=backend,
        inductor_s=_us(metrics.inductor_cumulative_compile_time_us),
        restart_reasons=tuple(sorted(metrics.restart_reasons or ())), start_us=metrics.start_time_us,
        **{name: getattr(metrics, name) for name in same})


def resume_parent(co_name: str | None) -> str | None:
    """For a graph-break continuation (``torch_dynamo_resume_in_f_at_16``), the frame it continues."""
    match = _RESUME_RE.match(co_name or "")
    return match.group("parent") if match else None


def _count_leaf_guards(manager: Any) -> int:
    return len(manager.get_leaf_guards()) + sum(_count_leaf_guards(c) for c in manager.get_child_managers())


def live_guard_counts() -> dict[str, list[int]]:
    """Leaf guards checked at run time per live cache entry, keyed by ``"name (file:line)"``."""
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
    """The artifact logger Dynamo writes each graph break to (``in user code at FILE:LINE``); raising only it to DEBUG
    captures the locations without printing them or resetting the user's ``TORCH_LOGS``."""
    from torch._dynamo import symbolic_convert

    return symbolic_convert.graph_break_log


def cudagraph_tree_state(device_index: int) -> str | None:
    """What the CUDA-graph tree on ``device_index`` did last this step (``WARMUP``, ``RECORDING``, ``EXECUTION``,
    ``NONE``: an eager step), or None when there is no tree."""
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.get_manager(device_index, create_if_none_exists=False)
    if manager is None:
        return None
    if manager.current_gen != type(manager).get_curr_generation():
        return "NONE"
    return str(manager.path_state.name)


def cuda_kernel_profiler() -> Any:
    """A started ``torch.profiler.profile`` recording CUDA kernels only (for :func:`kernel_intervals`)."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CUDA])
    prof.start()
    return prof


def kernel_intervals(prof: Any) -> list[tuple[float, float]]:
    """(start, end) in microseconds of every device kernel a stopped profiler recorded."""
    from torch.autograd import DeviceType

    return [(float(e.time_range.start), float(e.time_range.end)) for e in prof.events()
            if e.device_type != DeviceType.CPU]


CompileCallback = Callable[[str, str], None]
"""Called with (trigger, compile_id); trigger is "DYNAMO", "LAZY_BACKWARD", "CUDAGRAPH_RECORDING"..."""


class CompileEvents:
    """The process's one subscription to torch's compile start/end callbacks, fanned out as ``(trigger, compile id)``
    (they also fire for the deferred backward and each CUDA-graph recording, for the outermost compile only)."""

    def __init__(self) -> None:
        self._listeners: list[tuple[CompileCallback, CompileCallback]] = []

    def subscribe(self, on_start: CompileCallback, on_end: CompileCallback | None = None) -> Callable[[], None]:
        """Call ``on_start`` (and ``on_end``) around every compile from now on; returns the unsubscribe."""
        listener = (on_start, on_end or (lambda trigger, compile_id: None))
        self._listeners.append(listener)
        self._register()
        return lambda: self._unsubscribe(listener)

    def _register(self) -> None:
        # Again when torch._dynamo.reset() cleared torch's callbacks since the last subscription.
        handler = torch._dynamo.callback_handler
        if self._start not in handler.start_callbacks:
            handler.register_start_callback(self._start)
        if self._end not in handler.end_callbacks:
            handler.register_end_callback(self._end)

    def _unsubscribe(self, listener: tuple[CompileCallback, CompileCallback]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)
        if not self._listeners:
            handler = torch._dynamo.callback_handler
            for remover, fn in ((handler.remove_start_callback, self._start), (handler.remove_end_callback, self._end)):
                with contextlib.suppress(ValueError):  # torch._dynamo.reset() already cleared the registry
                    remover(fn)

    def _start(self, args: Any) -> None:
        for on_start, _ in list(self._listeners):
            on_start(args.callback_trigger.name, str(args.compile_id))

    def _end(self, args: Any) -> None:
        for _, on_end in list(self._listeners):
            on_end(args.callback_trigger.name, str(args.compile_id))

    @property
    def listeners(self) -> int:
        return len(self._listeners)


COMPILE_EVENT_SOURCE = CompileEvents()
"""The process's compile-event source (the telemetry, CUDA graphs, the shape policy and the console subscribe)."""


def compiling_target() -> tuple[str, str, int] | None:
    """(name, file, first line) of what Dynamo is compiling, from inside a compile start callback; None elsewhere.
    For a compiled ``nn.Module`` the wrapped module is named, not torch's ``wrap_inline`` wrapper."""
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


CUDAGRAPH_RECORDING_TRIGGER = "CUDAGRAPH_RECORDING"
"""The compile-callback trigger torch reports while a CUDA graph is recorded (``CallbackTrigger``)."""


def start_structured_trace(directory: str) -> Callable[[], str | None]:
    """Write torch's structured compile trace (tlparse's input) into ``directory``; ``stop`` returns the file."""
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
        logs.trace_structured("str", lambda: (text, index), suppress_context=True)  # noqa: B023 - called at once

    def stop() -> str | None:
        # torch 2.13+ keeps the path in _stream_path; torch 2.11 has only the open file's name.
        path = getattr(handler, "_stream_path", None) or getattr(handler.stream, "name", None)
        trace_log.removeHandler(handler)
        handler.close()
        trace_log.setLevel(prior_level)
        trace_log.propagate = prior_propagate
        return path

    return stop
