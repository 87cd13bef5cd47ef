"""What torch.compile did, read from torch's own records: counters, compile records, live guards, the graph-break
log, CUDA-graph trees, the device kernels a profiler saw. The compile events as they happen: ``events``."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


def cudagraph_tree_state(device_index: int) -> str | None:
    """What Inductor's CUDA-graph tree on ``device_index`` did last in this CUDA-graph step (since the
    last ``cudagraph_mark_step_begin``) in this thread: ``WARMUP``, ``RECORDING`` or ``EXECUTION`` (a
    replay); ``NONE`` when it ran nothing in this step (an eager step); None when no tree exists there.
    (``torch._inductor.cudagraph_trees``: the manager's ``path_state``, and its ``current_gen``, which
    every warm-up, recording and replay sets to the current generation, ``MarkStepBox``'s step mark.)"""
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
    """(start, end) in microseconds of every device kernel a stopped profiler recorded: its events on a device
    (``FunctionEvent.device_type`` other than CPU) with their ``time_range``."""
    from torch.autograd import DeviceType

    return [(float(e.time_range.start), float(e.time_range.end)) for e in prof.events()
            if e.device_type != DeviceType.CPU]
