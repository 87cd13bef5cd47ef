"""CompileCollector and CompileProgress on real compilations (Dynamo's eager backend, no mocks)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from runner.stack.console.progress import CompileProgress
from runner.telemetry.collector import CompileCollector, recompile_events, short_reason


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def breaks_once(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    torch._dynamo.graph_break()  # the one graph break
    return y.cos() + 1


def test_two_recompiles_one_graph_break_with_reasons() -> None:
    """3 static shapes: 1 compile + 2 recompiles of the user frame; the break's continuation also
    recompiles twice, which is folded into its parent (see collector's docstring)."""
    compiled = torch.compile(breaks_once, backend="eager", dynamic=False)
    collector = CompileCollector().start()
    try:
        for step, n in enumerate((2, 3, 4)):
            collector.step = step
            compiled(torch.randn(n))
        compiled(torch.randn(3))  # a cached shape: no new compile
        figures = collector.figures()
    finally:
        collector.stop()

    assert figures["compile/recompiles"] == 2
    assert figures["compile/frame_recompiles"] == 4  # breaks_once x2 + its continuation x2
    assert figures["compile/frames"] == 2  # breaks_once and torch_dynamo_resume_in_breaks_once_at_N
    assert figures["compile/frame_compiles"] == 6
    assert figures["compile/graphs"] == 6
    assert figures["compile/graph_breaks"] == 1
    assert figures["compile/graph_break_hits"] == 3  # traced once per compile of breaks_once
    reasons = figures["compile/recompile_reasons"]
    assert [r["name"] for r in reasons] == ["breaks_once", "breaks_once"]
    assert [r["step"] for r in reasons] == [1, 2]
    assert "size mismatch at index 0. expected 2, actual 3" in reasons[0]["reason"]
    assert "expected 3, actual 4" in reasons[1]["reason"]
    (gb,) = figures["compile/graph_break_reasons"]
    assert "graph_break()" in gb["reason"]
    line = breaks_once.__code__.co_firstlineno + 2
    assert gb["user_frame"] == f"{__file__}:{line}"
    # Every reason comes with a suggested fix (runner.telemetry.advice), in the figures and the report.
    from runner.telemetry.advice import graph_break_fix, guard_location, recompile_fix
    from runner.telemetry.report import format_summary

    assert gb["fix"] == graph_break_fix(gb["reason"], gb["user_frame"]) != ""
    assert all(r["fix"] for r in reasons)
    assert reasons[0]["fix"] == recompile_fix(reasons[0]["reason"], guard_location(reasons[0]["reason"]))
    assert f"Fix: {gb['fix']}" in format_summary(figures)
    assert figures["compile/guards_total"] > 0 and figures["compile/guards_max"] > 0
    assert figures["compile/live_guards_total"] > 0
    assert figures["compile/time_s"] > 0 and figures["compile/dynamo_s"] > 0
    assert figures["compile/fallbacks"] == 0
    kinds = [e["kind"] for e in figures["compile/events"]]
    assert kinds == ["compile", "compile", "recompile", "recompile", "recompile", "recompile"]


def test_deltas_exclude_compiles_before_start_and_freeze_after_stop() -> None:
    torch.compile(breaks_once, backend="eager", dynamic=False)(torch.randn(5))  # before start
    collector = CompileCollector().start()
    assert collector.figures()["compile/frame_compiles"] == 0
    assert collector.figures()["compile/graph_breaks"] == 0
    compiled = torch.compile(lambda x: x * 2, backend="eager")
    compiled(torch.randn(2))
    collector.stop()
    compiled(torch.randn(2, 2))  # after stop: not counted
    assert collector.figures()["compile/frame_compiles"] == 1


def test_recompile_limit_hit_is_an_eager_fallback() -> None:
    compiled = torch.compile(lambda x: x + 1, backend="eager", dynamic=False)
    # config.patch, not monkeypatch: Dynamo's config module does not survive setattr/undo.
    with torch._dynamo.config.patch(recompile_limit=1), CompileCollector() as collector:
        for n in (2, 3, 4):
            compiled(torch.randn(n))
    figures = collector.figures()
    assert figures["compile/fallbacks"] >= 1
    assert figures["compile/recompiles"] == 0
    (fallback,) = figures["compile/fallback_reasons"]
    assert "recompile limit" in fallback["reason"] and "<lambda>" in fallback["name"]


def test_continuation_recompile_without_parent_recompile_is_counted() -> None:
    from runner.torch_internals.observation import CompileRecord

    def rec(cid: str, name: str, reason: str | None) -> CompileRecord:
        return CompileRecord(cid, True, name, "m.py", 1, 3, 0.1, 0.0, 0.0, reason, (), None, None, None, None)

    parent, child = "f", "torch_dynamo_resume_in_f_at_4"
    records = [rec("0/0", parent, None), rec("1/0", child, None), rec("1/1", child, "y changed")]
    assert [e["name"] for e in recompile_events(records)] == [child]


def test_short_reason_skips_torch_preamble() -> None:
    text = "Encountered graph break when attempting to trace CALL: x\n\nCall to `foo()`\n  Explanation: ..."
    assert short_reason(text) == "Call to `foo()`"


def test_cudagraph_recording_keeps_the_recompile_step_in_the_event_log() -> None:
    """A CUDA-graph recording of a recompiled graph reaches the callbacks with the same compile id,
    steps later (after cudagraphs' warm-up). It must not move the recompile to its own step.
    Driven through torch's own callback handler with the trigger cudagraph trees use (CPU)."""
    from torch._dynamo.callback import CallbackTrigger

    compiled = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
    with CompileCollector() as collector:
        collector.step = 3
        compiled(torch.randn(2))
        collector.step = 4
        compiled(torch.randn(3))  # recompile "0/1", in step 4
        (recompile,) = [e for e in collector.events if e["kind"] == "recompile"]
        collector.step = 9  # the graph is recorded later, as cudagraph_trees does after warm-up
        with torch._dynamo.callback_handler.install_callbacks(
            CallbackTrigger.CUDAGRAPH_RECORDING, recompile["compile_id"]
        ):
            time.sleep(0.01)
        figures = collector.figures()
    (reason,) = figures["compile/recompile_reasons"]
    assert reason["step"] == 4, reason  # the step the recompile happened in, not the recording's (9)
    recording = figures["compile/events"][-1]
    assert recording["kind"] == "cudagraph_recording" and recording["step"] == 9
    assert recording["compile_id"] == recompile["compile_id"]
    assert figures["compile/cudagraph_recordings"] == 1
    assert figures["compile/cudagraph_recording_s"] >= 0.01
    # A recording runs the graph, it does not compile it: not in the compile wall time.
    compiles = [e["duration_s"] for e in figures["compile/events"] if e["kind"] != "cudagraph_recording"]
    assert figures["compile/wall_s"] == pytest.approx(sum(compiles))


def test_progress_prints_start_heartbeat_and_end_from_real_compile() -> None:
    """The compile lasts until a heartbeat has been printed (an event, not a fixed sleep), so the
    test does not depend on the heartbeat thread being scheduled within some time on a busy machine."""
    lines: list[str] = []
    lock = threading.Lock()
    heartbeat = threading.Event()

    def sink(message: str) -> None:
        with lock:
            lines.append(message)
        if message.startswith("  still compiling"):
            heartbeat.set()

    progress = CompileProgress(sink, interval_s=0.05)

    def slow_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # noqa: ANN202
        assert heartbeat.wait(timeout=60), "no heartbeat within 60 s while compiling"
        return gm.forward

    def add_one(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    with CompileCollector(listeners=(progress,)):
        torch.compile(add_one, backend=slow_backend)(torch.randn(2))
    progress.close()
    start, end = [line for line in lines if not line.startswith("  still compiling")]
    assert start.startswith("compiling add_one (") and start.endswith(" ...")
    assert end.startswith("compiled add_one (") and end.endswith(" s")
    assert lines.index(start) < min(i for i, line in enumerate(lines) if line.startswith("  still compiling add_one"))
