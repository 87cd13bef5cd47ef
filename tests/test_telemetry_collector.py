"""CompileCollector and CompileProgress on real compilations (Dynamo's eager backend, no mocks)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from runner.telemetry.collector import CompileCollector
from runner.telemetry.progress import CompileProgress
from runner.telemetry.reasons import recompile_events, short_reason


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
    from runner.torch_internals import CompileRecord

    def rec(cid: str, name: str, reason: str | None) -> CompileRecord:
        return CompileRecord(cid, True, name, "m.py", 1, 3, 0.1, 0.0, 0.0, reason, (), None, None, None, None)

    parent, child = "f", "torch_dynamo_resume_in_f_at_4"
    records = [rec("0/0", parent, None), rec("1/0", child, None), rec("1/1", child, "y changed")]
    assert [e["name"] for e in recompile_events(records)] == [child]


def test_short_reason_skips_torch_preamble() -> None:
    text = "Encountered graph break when attempting to trace CALL: x\n\nCall to `foo()`\n  Explanation: ..."
    assert short_reason(text) == "Call to `foo()`"


def test_progress_prints_start_heartbeat_and_end_from_real_compile() -> None:
    lines: list[str] = []
    lock = threading.Lock()

    def sink(message: str) -> None:
        with lock:
            lines.append(message)

    progress = CompileProgress(sink, interval_s=0.05)

    def slow_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # noqa: ANN202
        time.sleep(0.3)  # a compile long enough to need heartbeats
        return gm.forward

    def add_one(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    with CompileCollector(listeners=(progress,)):
        torch.compile(add_one, backend=slow_backend)(torch.randn(2))
    progress.close()
    assert lines[0].startswith("compiling add_one (") and lines[0].endswith(" ...")
    assert any(line.startswith("  still compiling add_one") for line in lines[1:-1])
    assert lines[-1].startswith("compiled add_one (") and lines[-1].endswith(" s")
