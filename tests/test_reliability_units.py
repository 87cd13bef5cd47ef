"""Unit tests of the reliability pieces, and pins of the torch internals they read."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from runner.config.schema import OnError
from runner.data.resumable import ResumableDataLoader, as_resumable
from runner.reliability.checkpoint_io import atomic_torch_save, remove_stale_temps
from runner.stack.compile_errors import CompileErrorWatch, explain_compile_error


def _loader(workers: int = 0) -> DataLoader:
    data = TensorDataset(torch.arange(30))
    return DataLoader(data, batch_size=4, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(7),
                      num_workers=workers, persistent_workers=workers > 0)


def _take(it: object, n: int) -> list[list[int]]:
    return [next(it)[0].tolist() for _ in range(n)]  # type: ignore[call-overload]


@pytest.mark.parametrize("stop_at", [3, 7])  # mid-epoch, and exactly at the end of epoch 0 (7 batches)
def test_resumable_loader_continues_with_the_same_batches(stop_at: int) -> None:
    ref = as_resumable(_loader())
    expected = [b[0].tolist() for epoch in range(3) for b in ref]
    first = as_resumable(_loader())
    it = iter(first)
    seen = _take(it, stop_at)
    state = first.state_dict()

    resumed = as_resumable(_loader())  # a new process: fresh generator, then the checkpoint's state
    resumed.load_state_dict(state)
    rest = [b[0].tolist() for epoch in range(3) for b in resumed]
    assert isinstance(resumed, ResumableDataLoader) and len(resumed) == 7
    assert seen + rest[: len(expected) - stop_at] == expected


def test_atomic_save_replaces_whole_file_and_cleans_stale_temps(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    stale = tmp_path / ".last.ckpt.abc123.tmp"
    stale.write_bytes(b"half a checkpoint")
    atomic_torch_save({"step": 1}, target)
    assert not stale.exists()
    atomic_torch_save({"step": 2}, target)
    assert torch.load(target)["step"] == 2
    assert remove_stale_temps(target) == []
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


# -- compile errors, with real torch exceptions --------------------------------------------------------
def _recompiling() -> None:
    def g(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * n

    cg = torch.compile(g, backend="eager", dynamic=False)
    for n in range(6):
        cg(torch.ones(3), n)


def test_recompile_limit_hit_names_the_failing_guard() -> None:
    watch = CompileErrorWatch(OnError["raise"])
    with torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=False):
        watch.configure()  # sets fail_on_recompile_limit_hit; teardown restores it
        try:
            with pytest.raises(torch._dynamo.exc.FailOnRecompileLimitHit) as info:
                _recompiling()
        finally:
            watch.teardown()
        assert torch._dynamo.config.fail_on_recompile_limit_hit is False
    msg = explain_compile_error(info.value, watch)
    assert msg is not None
    assert "recompile limit recompile_limit=2 hit by 'g'" in msg
    assert "`n == 1`" in msg  # the guard that kept failing
    assert "dynamic.recompile_limit" in msg and "compile.on_error=eager" in msg


def test_recompile_limit_under_eager_is_logged_with_the_guard(caplog: pytest.LogCaptureFixture) -> None:
    watch = CompileErrorWatch(OnError["eager"])
    with torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=False):
        watch.configure()
        try:
            with caplog.at_level(logging.WARNING, logger="runner.stack.compile_errors"):
                _recompiling()  # runs on, eagerly
        finally:
            watch.teardown()
    assert watch.limit_hits and watch.limit_hits[0]["guard"] == "n == 1"
    assert "the guard that kept failing: n == 1" in caplog.text
    assert watch.figures()["compile/recompile_limit_hits"][0]["function"].startswith("'g'")


def test_graph_break_under_fullgraph_is_explained() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        print("side effect")
        return x + 1

    with pytest.raises(torch._dynamo.exc.Unsupported) as info:
        torch.compile(f, backend="eager", fullgraph=True)(torch.ones(2))
    msg = explain_compile_error(info.value)
    assert msg is not None
    assert "frame 'f'" in msg and "test_reliability_units.py" in msg and 'print("side effect")' in msg
    assert "graph break 'Failed to trace builtin operator'" in msg and "compile.fullgraph=false" in msg


@pytest.mark.slow
def test_dynamic_range_specialised_by_inductor_is_explained() -> None:
    """A real Inductor compile on CPU: a float sum over a dim marked dynamic up to 10000 is guarded
    at <= 4096 by the C++ codegen, and mark_dynamic's strict range fails. The paragraph says so."""
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    torch._dynamo.reset()
    x = torch.randn(100)
    torch._dynamo.mark_dynamic(x, 0, min=2, max=10_000)
    with pytest.raises(ConstraintViolationError) as info:
        torch.compile(lambda t: t.sum() * 2, backend="inductor")(x)
    msg = explain_compile_error(info.value)
    assert msg is not None and "frame '<lambda>'" in msg
    assert "over `L['t'].size()[0] <= 10000`" in msg
    assert "to `2 <= L['t'].size()[0] and L['t'].size()[0] <= 4096`" in msg
    assert "dynamic=unbacked" in msg and "dynamic.max" in msg


def test_non_compile_errors_are_left_alone() -> None:
    assert explain_compile_error(ValueError("not a compile error")) is None




# -- the non-finite flag every rank agrees on (the 2-process runs: tests/test_nonfinite_ddp.py) ------
def test_nonfinite_flag_orders_nan_above_inf() -> None:
    """The flag is all-reduced with max across ranks: nan anywhere must win over inf elsewhere."""
    from types import SimpleNamespace

    from runner.reliability.numerics import agreed_flag, nonfinite_flag

    inf, nan = float("inf"), float("nan")
    flags = [int(nonfinite_flag(torch.tensor(v))) for v in ([1.0, 2.0], [1.0, inf], [nan, 1.0], [nan, -inf])]
    assert flags == [0, 1, 2, 2]
    one_process = SimpleNamespace(world_size=1)
    assert agreed_flag(one_process, torch.tensor(2)) == 2  # type: ignore[arg-type]  # no process group: local
