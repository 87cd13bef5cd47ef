"""``compile.background``: compile in a second process while the first steps train eagerly, then switch."""

from __future__ import annotations

import collections
import dataclasses
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import lightning as L
import torch

from runner.config.schema import Background, OnError
from runner.stack.background.policy import (
    DECIDE_AFTER,
    SETTLE_STEPS,
    DeviceRoom,
    LateStep,
    Step,
    compiled_slower,
    core_to_spare,
    idle_cores,
    room_for_process,
    steps_left,
    switch_pays,
    worth_starting,
)
from runner.stack.background.process import CompileProcess, ProcessResult, allowed_cpus, start_process_for
from runner.stack.compiling.compile import CompiledModules, apply_compile
from runner.stack.compiling.plan import CompilePlan
from runner.stack.settings import CacheArtifacts, CompileSettings, LightningSide, StackComponent
from runner.stack.step_mode import Eager, StepMode

log = logging.getLogger(__name__)

TIMEOUT_S = 3600.0
_PLACEMENT = {Background.auto: "pinned", Background.shared: "shared", Background.pinned: "pinned"}
_SHOWN = {"shared": "on every core", "pinned": "pinned to one core", "others": "on every core but one, the run's"}
_MEASURED = {"speedup_x": "compile/background_speedup_x", "switch_s": "compile/background_switch_s"}


class BackgroundCompile(StackComponent):
    """Eager steps while a compile process fills the caches, then the compiled step (module docstring)."""

    name = "background"

    def __init__(self, policy: Background, settings: CompileSettings, lightning: LightningSide,
                 say: Callable[[str], None], step_mode: StepMode, room: Callable[[], DeviceRoom] | None = None) -> None:
        self.policy = policy
        self.room = room
        self.room_said: str | None = None
        self.step_mode = step_mode
        # The process compiles in itself, and the run alone loads and saves the cache artifacts.
        self.settings = dataclasses.replace(settings, compile=dataclasses.replace(
            settings.compile, background=Background.disabled), artifacts=CacheArtifacts())
        self.lightning, self.say = lightning, say
        self.process: CompileProcess | None = None
        self.pending = False
        self.kept_eager = False
        self.outcome = "not started"
        self.result: ProcessResult | None = None
        self.switch_step: int | None = None
        self.eager_steps = 0
        self._module: L.LightningModule | None = None
        self._threads: int | None = None  # the run's thread count while a pinned process has a core
        self._batch: Any = None  # the first batch, until the process starts
        self._late: LateStep | None = None
        self._spare = False  # a core training does not use (more cores than torch threads)
        self._last: float | None = None
        self._eager_s: collections.deque[float] = collections.deque(maxlen=200)
        # After the switch, until compiled_slower decides: the eager steps (the speedup pairs' eager side) and the
        # compiled ones, in ms; why the step running now is eager (None: compiled); compiled steps still left out.
        self._after_eager: list[float] = []
        self._after_compiled: list[float] = []
        self._eager_now: Eager | None = None
        self._settle = SETTLE_STEPS
        self.checked: str | None = None
        self.after_switch_x: float | None = None
        self.reverted: str | None = None

    @property
    def placement(self) -> str:
        """Where the process runs: under ``auto`` on a GPU every core but the run's (its host work is one thread)."""
        return "others" if self.room is not None and self.policy is Background.auto else _PLACEMENT[self.policy]

    def _tell(self, message: str, level: int = logging.INFO) -> None:
        log.log(level, message)
        self.say(message)

    def apply(self, module: torch.nn.Module) -> None:
        """Save the module as the fit received it, before any transform (or say why it compiles in the run)."""
        assert isinstance(module, L.LightningModule)
        process, why = start_process_for(module, self.placement)
        if process is None:
            self.outcome = f"compiled in the run: {why[0]}"
            self._tell(f"compile.background={self.policy.value}: {why[1]}; it compiles in the first step instead",
                       logging.WARNING if why[0].startswith("the module cannot") else logging.INFO)
            return
        self.process, self._module, self.pending = process, module, True

    def compile_step(self, module: Any, step: Step, plan: CompilePlan, compiled: CompiledModules,
                     accumulate: int) -> Step:
        """Compile at the switch (on the CPU, while waiting for the process), else now."""
        if not self.pending or self.lightning.device.type != "cpu":
            return apply_compile(module, step, plan, compiled, accumulate)
        self._late = LateStep(module, step, plan, compiled, accumulate)
        return self._late

    def configure(self) -> None:
        """Every step eager once the setup is done: nothing compiles in the run until the switch (validation
        included)."""
        if self.pending:
            self.step_mode.hold(Eager.beside)

    def prepare_batch(self, batch: Any) -> Any:
        """The first batch, as the step receives it, starts the compile process (``auto`` without a spare
        core: kept until :data:`DECIDE_AFTER` eager steps say whether the run is long enough). After the switch, notes
        whether the step runs eagerly (the telemetry asked before the step: the eager side of a speedup pair)."""
        if self._checking:
            self._eager_now = self.step_mode.eager_because()
        if self.pending and self.process is not None and self.process.proc is None and self._batch is None:
            cpus = allowed_cpus()
            # Only auto asks whether other work keeps that core busy: pinned and shared start regardless.
            sampled = self.policy is Background.auto and self.room is None and len(cpus) > torch.get_num_threads()
            idle = idle_cores(cpus) if sampled else None
            self._spare, busy = core_to_spare(len(cpus), torch.get_num_threads(), idle)
            if busy:
                self._tell(f"compile: no core to spare for the compile process: {busy}; the run times its eager "
                           "steps first and starts one only if enough training is left")
            self._batch = batch
            if self.room is None and (self.policy is not Background.auto or self._spare):
                self._start()
            else:
                self._last = time.perf_counter()
        return batch

    def _start(self, why: str = "") -> None:
        assert self.process is not None and self._module is not None
        trainer = self._module.trainer
        batch, self._batch = self._batch, None
        self.process.start(batch, {
            "settings": self.settings, "device": str(self.lightning.device), "precision": str(trainer.precision),
            "accumulate_grad_batches": self.lightning.accumulate_grad_batches, "threads": torch.get_num_threads(),
            "matmul_precision": torch.get_float32_matmul_precision(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "measure": self.policy is Background.auto})
        if self.placement == "pinned" and not self._spare and (threads := torch.get_num_threads()) > 1:
            # The process has a core of its own: the run's threads leave it alone (one OpenMP thread
            # sharing its core would hold every parallel region of the run's steps back: 0.85 s eager
            # steps instead of 0.13 s, quickstart GPT, 2 cores). Given back when it exits.
            self._threads = threads
            torch.set_num_threads(threads - 1)
        self._last = time.perf_counter()
        self.outcome = "not ready when training ended"
        apart = self._spare and self.placement == "pinned"
        where = f"on core {max(allowed_cpus())}, which training does not use" if apart else _SHOWN[self.placement]
        self._tell(f"compile: compiling beside the run in a second process (compile.background={self.policy.value}, "
                   f"{where}{why}); the steps run eagerly until it is ready")

    @property
    def _checking(self) -> bool:
        """After a switch from a compile process, until the compiled steps are measured against the eager ones."""
        return self.switch_step is not None and self.result is not None and self.result.ok and self.checked is None

    def on_step_end(self, step: int) -> None:
        """Count the eager step; once the compile process has exited, switch (or say why not); after the switch, time
        the compiled steps against the eager ones."""
        if self._checking:
            self._check_after_switch(step)
            return
        if not self.pending or self.process is None or (self.process.proc is None and self._batch is None):
            return
        now = time.perf_counter()
        if self._last is not None:
            self._eager_s.append(now - self._last)
        self._last = now
        self.eager_steps += 1
        if self.process.proc is None:  # auto: start only where the device has room, or for a run long enough
            if self.room is not None:
                self._start_if_room(step)
            elif self.eager_steps >= DECIDE_AFTER:
                self._start_or_stay()
            return
        result = self.process.poll()
        if result is None and self.process.elapsed() > TIMEOUT_S:
            self.process.stop()
            result = ProcessResult(False, self.process.elapsed(), error=f"not finished after {TIMEOUT_S:.0f} s")
        if result is not None:
            self._decide(result, step)

    def _start_if_room(self, step: int) -> None:
        """``auto`` on CUDA, after the first step: start the process if it fits beside the run, else compile in
        the run from the next step (as ``compile.background=disabled`` does from the first)."""
        assert self.room is not None and self.process is not None
        fits, self.room_said = room_for_process(self.room())
        if fits:
            return self._start(f"; the device has room: {self.room_said}")
        self.process.stop()
        self._batch, self.pending = None, False
        self.outcome = f"compiled in the run at step {step}: no room on the device for a compile process"
        self._tell(f"compile: compiling in the run from step {step} (compile.background=auto): no room on the device "
                   f"for a compile process ({self.room_said}); compile.background=shared compiles beside it regardless")
        self._switch(step)

    def _start_or_stay(self) -> None:
        start, why = worth_starting(self.eager_ms(), steps_left(self._module), self._spare)
        if start:
            self._start()
            return
        assert self.process is not None
        self.process.stop()
        self._batch, self.pending, self.kept_eager = None, False, True
        self.outcome = f"stayed eager: {why}"
        self._tell(f"compile: the run stays eager (compile.background=auto): {why}; compile.background=pinned compiles "
                   "beside it regardless, compile.background=disabled compiles first")

    def _decide(self, result: ProcessResult, step: int) -> None:
        self.result, self.pending = result, False
        assert self.process is not None
        self.process.stop()
        self._give_back_core()
        ready = f"after {result.seconds:.1f} s (step {step})"
        if not result.ok:
            eager = self.settings.compile.on_error is OnError["eager"]
            then = "the run stays eager (compile.on_error=eager)" if eager else "compiling in the run instead"
            after = "stayed eager" if eager else f"compiled in the run at step {step}"
            self.outcome = f"failed ({result.error}); {after}"
            self._tell(f"compile: the compile process beside the run failed {ready}: {result.error}; {then}",
                       logging.WARNING)
            if eager:
                self.kept_eager = True
                return
            self._switch(step)
            return
        pays, why = (switch_pays(result.measured, self.eager_ms(), steps_left(self._module))
                     if self.policy is Background.auto else (True, ""))
        if not pays:
            self.kept_eager = True
            self.outcome = f"stayed eager: {why}"
            self._tell(f"compile: the compile beside the run was ready {ready}, but switching does not pay: {why}; "
                       "the run stays eager (compile.background=shared switches regardless)")
            return
        self.outcome = f"switched at step {step}"
        self._tell(f"compile: the compile beside the run was ready {ready}; switching to the compiled step"
                   + (f" ({why})" if why else ""))
        self._switch(step)

    def _check_after_switch(self, step: int) -> None:
        """Time this step; once :func:`compiled_slower` can tell, go back to eager if the compiled step is clearly
        slower (the promise: compiling beside the run never makes it later)."""
        now = time.perf_counter()
        ms, self._last = 1e3 * (now - (self._last or now)), now
        if self._eager_now is Eager.pair:
            self._after_eager.append(ms)
        elif self._eager_now is None:
            if self._settle:
                self._settle -= 1  # it compiled (from the warm cache, or the backward lazily): not a step time
            else:
                self._after_compiled.append(ms)
        # The pairs' eager steps ran beside the compiled ones, under the same load; without them (fewer than 3, or
        # telemetry.speedup_steps=0) the eager steps before the switch, slower for sharing the cores with the process.
        interleaved = len(self._after_eager) >= 3
        eager = self._after_eager if interleaved else [1e3 * s for s in self._eager_s]
        decided = compiled_slower(eager, self._after_compiled,
                                  "interleaved with them" if interleaved else "before the switch")
        if decided is None:
            return
        slower, self.after_switch_x, self.checked = decided
        if not slower:
            return
        self.reverted, self.kept_eager = f"at step {step}: {self.checked}", True
        self.outcome = f"switched at step {self.switch_step}, back to eager at step {step}: the compiled step is slower"
        self._tell(f"compile: back to eager from step {step}: {self.checked}; compiling beside the run never makes it "
                   "later, so the rest of the run trains eagerly (compile.background=disabled compiles in the run "
                   "regardless)", logging.WARNING)
        self.step_mode.hold(Eager.reverted)

    def _switch(self, step: int) -> None:
        """From the next step on, compiled; ``step`` (steps done so far) is that step's index, counted from 0
        as ``perf/step_series`` counts."""
        self.switch_step = step
        if self._late is not None:
            self._late.compile()
        self.step_mode.release(Eager.beside)

    def _give_back_core(self) -> None:
        if self._threads is not None:
            torch.set_num_threads(self._threads)
            self._threads = None

    def eager_ms(self) -> float | None:
        """Median wall time of the eager steps while the compile process ran (the recent 200)."""
        return 1e3 * statistics.median(self._eager_s) if self._eager_s else None

    def teardown(self) -> None:
        if self.process is not None:
            if self.pending:
                self.kept_eager = True
                self._tell(f"compile: the run ended before the compile beside it was ready "
                           f"({self.process.elapsed():.0f} s); it trained eagerly throughout")
            self.process.stop()
        self._give_back_core()
        self.step_mode.release(Eager.beside)
        self.step_mode.release(Eager.reverted)
        self.pending = False
        super().teardown()

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"compile/background": self.policy.value, "compile/background_outcome": self.outcome}
        if self.room_said is not None:
            out["compile/background_room"] = self.room_said
        if self.switch_step is not None:
            out["compile/switch_step"] = self.switch_step
        if self.after_switch_x is not None:
            out["compile/after_switch_speedup_x"] = round(self.after_switch_x, 3)
        if self.reverted is not None:
            out["compile/background_reverted"] = self.reverted
        if self.process is None or self.process.started is None:
            return out  # no process ran (auto kept the run eager, or the module stayed in the run)
        out["compile/background_placement"] = _SHOWN[self.placement]
        out["compile/eager_steps_beside"] = self.eager_steps
        if (ms := self.eager_ms()) is not None:
            out["compile/eager_step_beside_ms"] = round(ms, 3)
        if self.result is not None:
            out["compile/background_s"] = round(self.result.seconds, 2)
            out.update({_MEASURED[k]: v for k, v in self.result.measured.items() if k in _MEASURED})
        return out

