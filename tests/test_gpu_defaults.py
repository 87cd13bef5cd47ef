"""The defaults the GPU rows decide (``runner.config.decisions.gpu_defaults``, docs/gpu.md "Defaults follow the
rows"), and
``compile.background=auto`` on a CUDA device: compiling beside the run where its memory has room.

Each default is one line read where its decision is made: flipping it (``monkeypatch``, as a row would flip the
line) changes that decision and nothing else. The CUDA path of ``compile.background=auto`` runs on the CPU with
its device reading given: the room decision as a pure function of given numbers, and the hand-over in a real fit
whose device-memory reader (``BackgroundCompile.room``) returns given numbers.
"""

from __future__ import annotations

import os
from typing import Any

import lightning as L
import pytest
import torch

from runner.config.decisions import gpu_defaults
from runner.config.decisions.stack import CudaGraphsFacts, cudagraphs_decision
from runner.config.schema import Background, CudaGraphMode, OptimizerPolicy, Scope
from runner.config.schema.options import ShapePolicy
from runner.stack.background import BackgroundCompile, DeviceRoom, room_for_process
from runner.stack.background.policy import resolve_background
from runner.stack.compiling.plan import CompilePlan, resolve_optimizer_policy
from runner.torch_internals import runtime
from tests.helpers import tiny_module
from tests.test_background_compile import WaitForTheProcess, _assert_gone, _fit

GIB = 2**30
CUDA = torch.device("cuda", 0)
PLAN = CompilePlan(scope=Scope.step, target=Scope.step, kwargs={"backend": "inductor"})


# -- the three defaults, one line each --------------------------------------------------------------------------
def test_cudagraphs_auto_follows_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    eligible = CudaGraphsFacts(on_cuda=True, shape=ShapePolicy.static)
    assert cudagraphs_decision(CudaGraphMode.auto, eligible).on
    monkeypatch.setattr(gpu_defaults, "CUDAGRAPHS_AUTO", False)
    off = cudagraphs_decision(CudaGraphMode.auto, eligible)
    assert not off.on and "runner.config.decisions.gpu_defaults" in off.reason and "reduce_overhead" in off.reason
    assert cudagraphs_decision(CudaGraphMode.reduce_overhead, eligible).on  # asked for: never the default's to undo


def test_the_graphed_optimizer_step_follows_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    adamw = torch.optim.AdamW(torch.nn.Linear(4, 4).parameters())
    assert resolve_optimizer_policy(OptimizerPolicy.auto, adamw, CUDA, True)[0] is OptimizerPolicy.fused
    monkeypatch.setattr(gpu_defaults, "OPTIMIZER_AUTO_GRAPHED", True)
    chosen, reason = resolve_optimizer_policy(OptimizerPolicy.auto, adamw, CUDA, True)
    assert chosen is OptimizerPolicy.graphed and "runner.config.decisions.gpu_defaults" in reason
    # Only where CUDA graphs are on and nothing blocks the graph-safe step.
    assert resolve_optimizer_policy(OptimizerPolicy.auto, adamw, CUDA, False)[0] is OptimizerPolicy.fused
    assert resolve_optimizer_policy(OptimizerPolicy.auto, adamw, CUDA, True, blocker="a hook")[0] \
        is OptimizerPolicy.fused


def test_background_on_cuda_follows_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_background(Background.auto, PLAN, 1, False, CUDA) == (Background.auto, None)
    monkeypatch.setattr(gpu_defaults, "BACKGROUND_AUTO_ON_CUDA", False)
    policy, why = resolve_background(Background.auto, PLAN, 1, False, CUDA)
    assert policy is Background.disabled and why is not None and "runner.config.decisions.gpu_defaults" in why
    assert resolve_background(Background.shared, PLAN, 1, False, CUDA)[0] is Background.shared  # opted in
    assert resolve_background(Background.auto, PLAN, 1, False, torch.device("cpu"))[0] is Background.auto


# -- compile.background=auto on CUDA: the room decision ---------------------------------------------------------------
@pytest.mark.parametrize(("free", "total", "peak", "fits"), [
    (70 * GIB, 80 * GIB, 4 * GIB, True),  # BERT-base on an H100: 2 x 4 + 1 GiB needed, 8 GiB kept for the run
    (17 * GIB, 80 * GIB, 4 * GIB, True),  # 9 + 8 = 17: just fits
    (16 * GIB, 80 * GIB, 4 * GIB, False),
    (40 * GIB, 80 * GIB, 20 * GIB, False),  # a large step: 41 GiB for the process alone
    (70 * GIB, 80 * GIB, 32 * GIB, False),  # 65 GiB + 8 GiB kept > 70
])
def test_auto_on_cuda_starts_a_process_only_where_the_device_has_room(free: int, total: int, peak: int,
                                                                     fits: bool) -> None:
    ok, said = room_for_process(DeviceRoom(free, total, peak))
    assert ok is fits
    assert said.startswith(f"{free / GIB:.1f} of {total / GIB:.1f} GiB free") and f"{peak / GIB:.1f} GiB" in said


# -- the hand-over, with the device's memory given ------------------------------------------------------------------
class GivenRoom(L.Callback):
    """Gives the fit's compile beside the run a device-memory reader returning ``room`` (what ``auto`` on a CUDA
    device reads with ``torch.cuda.mem_get_info``), after the stack is set up and before the first batch."""

    def __init__(self, room: DeviceRoom) -> None:
        self.room = room
        self.started_at: tuple[int, bool] | None = None
        """(reads of the device's memory, whether a process runs) at the end of the first step."""
        self.reads = 0

    def _read(self) -> DeviceRoom:
        self.reads += 1
        return self.room

    def on_fit_start(self, trainer: L.Trainer, *args: Any) -> None:
        background = trainer.strategy.stack.parts.background  # type: ignore[attr-defined]
        assert isinstance(background, BackgroundCompile)
        background.room = self._read

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        background = trainer.strategy.stack.parts.background  # type: ignore[attr-defined]
        if trainer.global_step == 1:  # the first step ran eagerly; the decision is made at its end
            self.started_at = (self.reads, background.process is not None and background.process.proc is not None)


def test_no_room_on_the_device_compiles_in_the_run_after_one_eager_step() -> None:
    given = GivenRoom(DeviceRoom(10 * GIB, 80 * GIB, 6 * GIB))
    record, strategy = _fit(tiny_module(), 4, given)
    figures = strategy.figures()
    assert given.started_at == (1, False)  # read once, after the first step; no process started
    assert figures["compile/background_outcome"] == ("compiled in the run at step 1: no room on the device for a "
                                                     "compile process")
    assert figures["compile/background_room"].startswith("10.0 of 80.0 GiB free; a compile process needs about 13.0")
    assert record.graphs == [0, 1, 0, 0] and figures["compile/switch_step"] == 1
    background = strategy.stack.parts.background  # type: ignore[union-attr]
    assert not background.process.dir.exists() and runtime.current_stance() == "default"


@pytest.mark.slow
def test_room_on_the_device_starts_the_process_after_the_first_step_and_switches_when_it_is_ready() -> None:
    given, wait = GivenRoom(DeviceRoom(70 * GIB, 80 * GIB, 4 * GIB)), WaitForTheProcess(at=2)
    record, strategy = _fit(tiny_module(), 6, given, wait)
    figures = strategy.figures()
    assert given.started_at == (1, True)
    assert figures["compile/background_outcome"] == "switched at step 3"
    assert figures["compile/background_room"].startswith("70.0 of 80.0 GiB free")
    assert record.graphs == [0, 0, 0, 1, 0, 0]  # eager until the process was done, then one compile
    assert figures["compile/eager_steps_beside"] == 3
    _assert_gone(wait.pid)


def test_others_leaves_the_runs_core_to_the_run() -> None:
    """``auto`` on a GPU places the compile process on every core but the lowest-numbered the run may use."""
    from runner.background_process import place

    cores = os.sched_getaffinity(0)
    if len(cores) < 2:
        pytest.skip("one usable core: nothing to leave to the run")
    try:
        place("others", min(cores))
        assert os.sched_getaffinity(0) == cores - {min(cores)}
    finally:
        os.sched_setaffinity(0, cores)
