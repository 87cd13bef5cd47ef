"""Pins every torch internal in runner.telemetry.torch_internals against the installed torch.

A torch upgrade that renames a counter, a metrics field or a private hook fails here, by name.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging

import pytest
import torch

from runner.telemetry import torch_internals as ti


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _break_fn(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos() + 1


@pytest.mark.parametrize("key", sorted(ti.COUNTERS))
def test_counter_names_are_incremented_by_torch(key: str) -> None:
    group, name, module = ti.COUNTERS[key]
    source = inspect.getsource(importlib.import_module(module))
    assert f'counters["{group}"]["{name}"]' in source


def test_graph_break_counter_group() -> None:
    from torch._dynamo import symbolic_convert

    assert f'add_to_stats("{ti.GRAPH_BREAK_GROUP}")' in inspect.getsource(symbolic_convert)


def test_metrics_fields_used_by_to_record_exist() -> None:
    from torch._dynamo.utils import CompilationMetrics

    fields = {f.name for f in dataclasses.fields(CompilationMetrics)}
    used = {
        "compile_id", "is_forward", "co_name", "co_filename", "co_firstlineno", "guard_count",
        "dynamo_cumulative_compile_time_us", "aot_autograd_cumulative_compile_time_us",
        "backward_cumulative_compile_time_us", "inductor_cumulative_compile_time_us", "recompile_reason",
        "restart_reasons", "fail_type", "fail_reason", "cudagraph_skip_reason", "start_time_us",
    }
    assert used <= fields, used - fields


def test_metrics_limit_roundtrip() -> None:
    before = ti.compilation_metrics_limit()
    ti.set_compilation_metrics_limit(1234)
    try:
        assert ti.compilation_metrics_limit() == 1234
    finally:
        ti.set_compilation_metrics_limit(before or 64)


def test_real_compile_records_callbacks_guards_and_resume_names() -> None:
    calls: list[tuple[str, str, object]] = []
    remove = ti.register_compile_callbacks(
        lambda trig, cid: calls.append(("start", trig, ti.compiling_target())),
        lambda trig, cid: calls.append(("end", trig, None)),
    )
    n_before = len(ti.compilation_metrics())
    try:
        torch.compile(_break_fn, backend="eager", dynamic=False)(torch.randn(3))
    finally:
        remove()
    records = [ti.to_record(m) for m in ti.compilation_metrics()[n_before:]]
    assert [r.co_name for r in records][0] == "_break_fn"
    assert ti.resume_parent(records[1].co_name) == "_break_fn"  # continuation naming
    assert records[0].guard_count and records[0].total_s > 0
    assert any("graph_break()" in reason for reason in records[0].restart_reasons)
    assert calls[0][:2] == ("start", "DYNAMO") and calls[0][2][0] == "_break_fn"  # type: ignore[index]
    assert sum(1 for c in calls if c[0] == "end") == 2
    live = ti.live_guard_counts()
    assert any(k.startswith("_break_fn") and v[0] > 0 for k, v in live.items())
    snap = ti.counters_snapshot()
    assert sum(ti.graph_break_counts(snap).values()) >= 1
    assert ti.counter(snap, "unique_graphs") >= 2
    assert ti.compiling_target() is None  # outside a compile


def test_compiling_target_names_the_wrapped_module() -> None:
    names: list[object] = []
    remove = ti.register_compile_callbacks(lambda t, c: names.append(ti.compiling_target()), lambda t, c: None)
    try:
        torch.compile(torch.nn.Linear(2, 2), backend="eager")(torch.randn(1, 2))
    finally:
        remove()
    assert names[0][0] == "Linear.forward"  # type: ignore[index]


def test_graph_break_logger_is_the_artifact_logger() -> None:
    logger = ti.graph_break_logger()
    assert isinstance(logger, logging.Logger) and logger.name.endswith("__graph_breaks")


def test_stance_swap_and_restore() -> None:
    assert ti.current_stance() == "default"
    prior = ti.force_eager_stance()
    try:
        assert ti.current_stance() == "force_eager"
    finally:
        ti.restore_stance(prior)
    assert ti.current_stance() == "default"
