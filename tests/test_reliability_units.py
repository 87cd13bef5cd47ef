"""Unit tests of the reliability pieces, and pins of the torch internals they read."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from runner.atomic_files import remove_stale_temps
from runner.config.schema import OnError
from runner.data.resumable import ResumableDataLoader, as_resumable
from runner.reliability.checkpoint_io import atomic_torch_save
from runner.stack.errors.explain import CompileErrorWatch, explain_compile_error


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
    assert "dynamic.recompile_limit" in msg and "leave compile.on_error at auto" in msg  # demote and go on


def test_recompile_limit_under_eager_is_logged_with_the_guard(caplog: pytest.LogCaptureFixture) -> None:
    watch = CompileErrorWatch(OnError["eager"])
    with torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=False):
        watch.configure()
        try:
            with caplog.at_level(logging.WARNING, logger="runner.stack.errors.explain"):
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


def test_pending_flags_give_the_worst_flag_and_its_first_step() -> None:
    """The guard keeps one loss copy per micro-batch and computes, when a read is due, what it used to
    accumulate step by step: the worst flag (nan over inf) and the first step with a non-finite loss."""
    from runner.reliability.numerics import pending_flags

    inf, nan = float("inf"), float("nan")

    def flags(steps_values: list[tuple[int, object]]) -> tuple[int, int]:
        flag, first = pending_flags([(step, torch.tensor(v)) for step, v in steps_values])
        return int(flag), int(first)

    assert flags([(3, 1.0), (3, 2.0), (4, 0.5)]) == (0, 0)
    assert flags([(3, 1.0), (4, inf), (5, nan), (6, 1.0)]) == (2, 4)  # nan wins; the first bad step is inf's
    assert flags([(7, -inf)]) == (1, 7)
    assert flags([(2, [1.0, 2.0]), (3, [nan, 1.0])]) == (2, 3)  # losses that are not scalars


# -- the per-step guard reads the device only when a decision is due -------------------------------------
class _HostReads(torch.overrides.TorchFunctionMode):
    """Counts the calls that read a tensor's value to the host (on an accelerator: a sync each)."""

    READS = frozenset({"item", "tolist", "__bool__", "__float__", "__int__", "__index__"})

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if getattr(func, "__name__", "") in self.READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


_GUARD_HOOKS = ("on_before_backward", "on_before_optimizer_step", "on_save_checkpoint", "on_train_end",
                "on_train_batch_end")


def _counted(guard: object, reads: _HostReads) -> None:
    """Every hook of ``guard`` runs under ``reads`` (what the guard itself reads, not Lightning's logging)."""
    for name in _GUARD_HOOKS:
        hook = getattr(guard, name)

        def run(*args: object, _hook: object = hook, **kwargs: object) -> object:
            with reads:
                return _hook(*args, **kwargs)  # type: ignore[operator]

        setattr(guard, name, run)


def _nan_fit(tmp_path: Path, check_every: int | None, nan_at: int | None, steps: int = 12,
             checkpoint_every: int = 0) -> tuple[object, _HostReads, BaseException | None]:
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch import nn

    from runner.config.schema import OnNonFinite
    from runner.reliability import NonFiniteGuard

    class Regression(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Linear(4, 1)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            if batch_idx + 1 == nan_at:
                x = x * float("nan")
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(4, 4, generator=g), torch.randn(4, 1, generator=g)) for _ in range(steps)]
    guard = NonFiniteGuard(OnNonFinite.stop, tmp_path / "last.ckpt", check_every=check_every)
    reads = _HostReads()
    _counted(guard, reads)
    callbacks: list[object] = [guard]
    if checkpoint_every:
        callbacks.append(ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=checkpoint_every,
                                         save_last=True, save_top_k=0))
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=bool(checkpoint_every),
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        callbacks=callbacks)  # type: ignore[arg-type]
    error = None
    try:
        trainer.fit(Regression(), DataLoader(data, batch_size=None))  # type: ignore[arg-type]
    except Exception as e:  # noqa: BLE001 - the test reads it
        error = e
    return trainer, reads, error


def test_finite_losses_are_read_from_the_device_every_check_every_steps(tmp_path: Path) -> None:
    trainer, reads, error = _nan_fit(tmp_path, check_every=4, nan_at=None)
    assert error is None and trainer.global_step == 12  # type: ignore[attr-defined]
    assert reads.count == 12 // 4  # one read per 4 steps (it was one per micro-batch)
    _, every_step, _ = _nan_fit(tmp_path / "cpu", check_every=None, nan_at=None)
    assert every_step.count == 12  # on the CPU a read waits for nothing: every step, as before


def test_check_every_is_one_on_the_cpu_and_the_logging_interval_elsewhere() -> None:
    from runner.reliability.numerics import check_every_for

    assert check_every_for(torch.device("cpu"), 50) == 1
    assert check_every_for(torch.device("cuda", 0), 50) == 50
    assert check_every_for(torch.device("cuda", 0), 0) == 1  # Trainer(log_every_n_steps=0)


def test_a_nan_read_late_stops_the_run_and_saves_nothing_poisoned(tmp_path: Path) -> None:
    from runner.reliability import NonFiniteLossError

    trainer, _, error = _nan_fit(tmp_path, check_every=4, nan_at=6)
    assert isinstance(error, NonFiniteLossError)
    assert "(nan) at step 6, read after step 7" in str(error) and "no checkpoint was written" in str(error)
    assert not (tmp_path / "last.ckpt").exists()  # its update ran: nothing of now is saved


def test_no_checkpoint_holds_weights_updated_with_a_nan_loss(tmp_path: Path) -> None:
    """A checkpoint every step: the nan at step 6 is read before step 6's checkpoint would be written."""
    from runner.reliability import NonFiniteLossError

    trainer, _, error = _nan_fit(tmp_path, check_every=4, nan_at=6, checkpoint_every=1)
    assert isinstance(error, NonFiniteLossError) and "at step 6, read after step 6" in str(error)
    assert "step 5) was written before it" in str(error)
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 5
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values())


def test_a_nan_read_before_its_update_saves_the_last_good_state(tmp_path: Path) -> None:
    from runner.reliability import NonFiniteLossError

    trainer, _, error = _nan_fit(tmp_path, check_every=4, nan_at=8)
    assert isinstance(error, NonFiniteLossError) and "at step 8" in str(error) and "after step 7" in str(error)
    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 7 and all(torch.isfinite(v).all() for v in ckpt["state_dict"].values())


def test_ranks_agree_on_a_signal_every_check_every_steps(tmp_path: Path) -> None:
    """Under several ranks the interrupt flag is exchanged (an all-reduce and a read) only on agreement
    steps, the same on every rank; a signal received between them is acted on at the next one. (Without a
    process group the exchange is the local flag: the cadence is what is checked here; the 2-rank runs are
    tests/test_fsdp.py's SIGTERM to one rank.)"""
    import signal
    from types import SimpleNamespace

    from runner.reliability.signals import GracefulInterrupt

    saved: list[int] = []
    trainer = SimpleNamespace(world_size=2, global_step=0, strategy=SimpleNamespace(root_device=torch.device("cpu")),
                              log_every_n_steps=4, global_rank=0)
    trainer.save_checkpoint = lambda path: saved.append(trainer.global_step)
    interrupt = GracefulInterrupt(tmp_path / "last.ckpt", check_every=4)
    interrupt._every = 4  # what on_train_start resolves (it also installs the signal handlers)
    reads = _HostReads()
    for step in range(1, 13):
        trainer.global_step = step
        if step == 5:
            interrupt._on_signal(int(signal.SIGTERM), None)
        with reads:
            interrupt.on_train_batch_end(trainer, None, None, None, step)  # type: ignore[arg-type]
    assert reads.count == 2  # agreement steps 4 and 8; after the save at 8 nothing more is exchanged
    assert saved == [8] and interrupt.step == 8


@pytest.mark.parametrize("hook", ["on_train_batch_end", "on_train_end"])
def test_a_signal_after_the_last_step_stops_nothing_and_says_so(tmp_path: Path, hook: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """A real SIGTERM to this process after the last step's boundary (later in that step's hooks, or while the fit
    ends): the run has finished, so nothing is saved, fit returns, and the figures say the signal came after the
    end rather than that it interrupted the run (a 2-rank run once read ``run/interrupted_by`` with exit 0)."""
    import os
    import signal

    import lightning as L
    from torch import nn

    from runner.reliability.signals import GracefulInterrupt

    steps = 3

    class Regression(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            return nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class SignalLate(L.Callback):
        """Sends SIGTERM to this process in ``hook`` at the last step, after GracefulInterrupt's own hook ran."""

        def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
            if hook == "on_train_batch_end" and trainer.global_step == steps:
                os.kill(os.getpid(), signal.SIGTERM)

        def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            if hook == "on_train_end":
                os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    interrupt = GracefulInterrupt(tmp_path / "last.ckpt")
    data = [(torch.randn(4, 4), torch.randn(4, 1)) for _ in range(steps)]
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[interrupt, SignalLate()])
    with caplog.at_level(logging.WARNING, logger="runner.reliability.signals"):
        trainer.fit(Regression(), DataLoader(data, batch_size=None))  # type: ignore[arg-type]
    assert trainer.global_step == steps and trainer.state.status.value == "finished"
    assert not (tmp_path / "last.ckpt").exists() and interrupt.step is None and not interrupt.interrupted
    figures = interrupt.figures()
    assert figures == {"run/signal_after_end": "SIGTERM"} and "run/interrupted_by" not in figures
    assert "received SIGTERM after the last training step" in caplog.text
    assert signal.getsignal(signal.SIGTERM) == before  # Lightning's teardown put the process's handler back


def test_flags_are_checked_in_the_losses_own_dtype_and_fold_across_intervals() -> None:
    from runner.reliability.numerics import fold_flags, pending_flags

    big = torch.tensor(1e300, dtype=torch.float64)  # finite; inf once made float32
    assert [int(v) for v in pending_flags([(1, big), (2, torch.tensor(1.0))])] == [0, 0]
    assert [int(v) for v in pending_flags([(1, big * 1e10), (2, torch.tensor(1.0, dtype=torch.bfloat16))])] == [1, 1]
    nothing, inf_at_3, nan_at_9 = ((torch.tensor(f), torch.tensor(s)) for f, s in ((0, 0), (1, 3), (2, 9)))
    assert [int(v) for v in fold_flags(inf_at_3, nan_at_9)] == [2, 3]  # the worst flag, the earliest bad step
    assert [int(v) for v in fold_flags(nothing, nan_at_9)] == [2, 9]
    assert fold_flags(None, inf_at_3) is inf_at_3


def _manual_fit(tmp_path: Path, policy: str, nan_at: int, steps: int) -> tuple[object, BaseException | None, int]:
    import lightning as L
    from torch import nn

    from runner.config.schema import OnNonFinite
    from runner.reliability import NonFiniteGuard

    class Manual(L.LightningModule):
        """Steps its optimizer itself (Lightning's manual optimization)."""

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Linear(4, 1)
            self.automatic_optimization = False

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
            x, y = batch
            if batch_idx + 1 == nan_at:
                x = x * float("nan")
            opt = self.optimizers()
            opt.zero_grad()  # type: ignore[union-attr]
            self.manual_backward(nn.functional.mse_loss(self.net(x), y))
            opt.step()  # type: ignore[union-attr]

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    guard = NonFiniteGuard(OnNonFinite(policy), tmp_path / "last.ckpt", check_every=1000)
    held = [0]

    class Held(L.Callback):
        def on_train_batch_end(self, *args: object) -> None:
            held[0] = max(held[0], len(guard._losses))

    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(4, 4, generator=g), torch.randn(4, 1, generator=g)) for _ in range(steps)]
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[guard, Held()])
    error = None
    try:
        trainer.fit(Manual(), DataLoader(data, batch_size=None))  # type: ignore[arg-type]
    except Exception as e:  # noqa: BLE001 - the test reads it
        error = e
    return trainer, error, held[0]


def test_skip_under_manual_optimization_detects_and_stops(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``skip`` cannot skip an update the module makes itself: a nan at step 4 stops the run (it was never
    reported, and every loss was kept: 200 copies after 200 steps)."""
    from runner.reliability import NonFiniteLossError

    _, error, _ = _manual_fit(tmp_path, "skip", nan_at=4, steps=20)
    assert isinstance(error, NonFiniteLossError) and "(nan) at step 4" in str(error)
    assert "manual optimization" in caplog.text and "stops the run instead" in caplog.text


def test_the_guard_holds_a_bounded_number_of_losses_however_long_no_read_comes(tmp_path: Path) -> None:
    from runner.reliability import NonFiniteLossError
    from runner.reliability.numerics import FOLD_EVERY

    trainer, error, held = _manual_fit(tmp_path, "stop", nan_at=7, steps=100)  # check_every=1000: one read, at the end
    assert held < FOLD_EVERY
    assert isinstance(error, NonFiniteLossError) and "(nan) at step 7, read after step 100" in str(error)


def test_the_cpu_read_agrees_with_the_device_flags() -> None:
    from runner.reliability.numerics import host_flags, pending_flags

    inf, nan = float("inf"), float("nan")
    cases = [[(3, 1.0), (3, 2.0)], [(3, 1.0), (4, inf), (5, nan)], [(7, -inf)], [(2, nan), (2, inf)]]
    for case in cases:
        losses = [(step, torch.tensor(v)) for step, v in case]
        assert host_flags(losses) == tuple(int(t) for t in pending_flags(losses)), case
    assert host_flags([(1, torch.tensor(1e300, dtype=torch.float64)), (2, torch.tensor(1.0))]) == (0, 0)
