"""``python -m runner.background_process DIR --placement=pinned|shared|others [--cpu=N]``: ``compile.background``'s
process. It fits the module and batch the run saved through the same ``CompileStrategy`` until two steps compile
nothing (filling the on-disk caches the run shares), with ``measure`` times eager against compiled steps, and writes
``DIR/result.json``."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

WARMUP_MAX = 8  # steps at most until two consecutive steps compile nothing
PAIRS = 6  # eager/compiled pairs timed with measure (ABBA order)


def place(placement: str, cpu: int | None) -> None:
    """Pin this process to one core (``pinned``) or every core but the run's (``others``) before torch loads."""
    # SCHED_IDLE was measured and dropped: on 2 cores it still slowed the run's eager steps 124 -> 459 ms (its
    # OpenMP threads yield their cores at every barrier).
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return
    if placement == "pinned":
        os.sched_setaffinity(0, {cpu})
    elif placement == "others" and (rest := os.sched_getaffinity(0) - {cpu}):
        os.sched_setaffinity(0, rest)


class _Probe:
    """A callback (subclassed in :func:`_probe`) choosing each step's mode: warm-up, then eager/compiled pairs."""

    def __init__(self, measure: bool, cpu_clock: bool) -> None:
        from runner.telemetry.speedup import SpeedupMeter

        self.meter = SpeedupMeter(pairs=PAIRS if measure else 0, steady_steps=2, count_flops=False)
        self.cpu_clock = cpu_clock
        self.warmup: list[tuple[float, float, bool]] = []  # (wall seconds, clock seconds, compiled something)
        self._state: tuple[str, Any, float, float, int] | None = None

    def start(self, step_mode: Any) -> None:
        """Before a step: its eager side of a pair is asked of the fit's step mode (``runner.stack.StepMode``)."""
        from runner.stack import Eager
        from runner.torch_internals import observation

        mode = self.meter.next_mode()
        held = Eager.pair if mode == "eager" else None
        if held is not None:
            step_mode.hold(held)
        clock = self._clock()
        self._state = (mode, (step_mode, held), time.perf_counter(), clock, observation.graphs_compiled())

    def _clock(self) -> float:
        if self.cpu_clock:
            return time.process_time()
        import torch

        # A CUDA step returns before its kernels ran: time it to the device's end (the pairs decide the switch).
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def end(self) -> bool:
        """Record the step that ran; whether the process has what it came for."""
        from runner.torch_internals import observation

        assert self._state is not None
        mode, (step_mode, held), wall0, clock0, graphs = self._state
        spent = self._clock() - clock0
        wall = time.perf_counter() - wall0
        if held is not None:
            step_mode.release(held)
        compiled = observation.graphs_compiled() > graphs
        if mode == "warmup":
            self.warmup.append((wall, spent, compiled))
        self.meter.record(len(self.meter.steps.points), mode, 1e3 * spent, compiled)
        return self.meter.done or len(self.warmup) >= WARMUP_MAX

    def compile_time(self, column: int) -> float:
        """Seconds the warm-up steps that compiled took beyond a steady step (wall: 0, clock: 1)."""
        steady = [w[column] for w in self.warmup if not w[2]] or [0.0]
        compiled = [w[column] for w in self.warmup if w[2]]
        return round(max(0.0, sum(compiled) - statistics.median(steady) * len(compiled)), 3)

    def measured(self) -> dict[str, Any]:
        out: dict[str, Any] = {"compile_s": self.compile_time(0), "warmup_steps": len(self.warmup)}
        figures = self.meter.figures(compile_time_s=0.0, series=False)
        if figures.get("perf/speedup_pairs"):
            out.update({"speedup_x": round(figures["perf/speedup_x"], 4), "pairs": figures["perf/speedup_pairs"],
                        "eager_ms": round(figures["perf/eager_step_ms"], 3),
                        "compiled_ms": round(figures["perf/compiled_step_ms"], 3)})
        return out


def _probe(measure: bool, cpu_clock: bool) -> Any:
    import lightning as L

    class Probe(_Probe, L.Callback):
        def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
            from runner.stack import stack_of

            stack = stack_of(trainer)
            assert stack is not None  # the fit runs through CompileStrategy
            self.start(stack.step_mode)

        def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
            if self.end():
                trainer.should_stop = True

    return Probe(measure, cpu_clock)


def _fit(payload: dict[str, Any], module: Any, probe: Any, steps: int) -> None:
    """Fit ``module`` on the run's batch through runner's strategy, as the run's trainer would."""
    import lightning as L
    from torch.utils.data import DataLoader

    from runner.strategy import CompileStrategy

    device = payload["device"]
    accumulate = payload["accumulate_grad_batches"]
    trainer = L.Trainer(
        accelerator="cpu" if device.startswith("cpu") else "auto", devices=1,
        strategy=CompileStrategy(settings=payload["settings"], device=device, console=False),
        precision=payload["precision"], max_steps=steps, accumulate_grad_batches=accumulate,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        limit_val_batches=0, num_sanity_val_steps=0, callbacks=[probe])
    batches: Any = [payload["batch"]] * (steps * accumulate)  # a list serves as a map-style dataset
    loader: DataLoader[Any] = DataLoader(batches, batch_size=None, collate_fn=lambda batch: batch)  # as it is
    trainer.fit(module, train_dataloaders=loader)


def compile_beside(directory: Path) -> dict[str, Any]:
    """Load what the run saved, fill the compile caches (and measure); what it measured."""
    import torch

    from runner.torch_internals import runtime

    payload = torch.load(directory / "payload.pt", weights_only=False)
    for entry in reversed(payload["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    torch.set_num_threads(payload["threads"])  # Inductor's CPU kernels and its cache key depend on it
    # Only what differs from a fresh process: setting even the default value changes Inductor's cache key
    # (the matmul precision is hashed as set, 'ieee', or left alone, 'none').
    if torch.get_float32_matmul_precision() != payload["matmul_precision"]:
        torch.set_float32_matmul_precision(payload["matmul_precision"])
    if torch.are_deterministic_algorithms_enabled() != payload["deterministic"]:
        torch.use_deterministic_algorithms(payload["deterministic"])
    module = torch.load(directory / "module.pt", weights_only=False, map_location=payload["device"])
    cpu_clock = payload["device"].startswith("cpu")
    clock = time.process_time if cpu_clock else time.perf_counter
    loading = clock()
    runtime.load_inductor()  # what the run has not loaded yet either: part of what its switch costs
    loading = clock() - loading
    probe = _probe(payload["measure"], cpu_clock)
    _fit(payload, module, probe, WARMUP_MAX + 2 * PAIRS)
    measured = probe.measured()
    if payload["measure"]:
        # What the switch will cost the run: the same compile again from the warm on-disk cache (the first
        # fit's teardown forgot what it compiled; Inductor's in-memory caches are emptied), plus loading
        # Inductor. CPU time on the CPU: the run's steps on the same cores do not count.
        runtime.clear_inductor_memory_caches()
        warm = _probe(False, cpu_clock)
        _fit(payload, module, warm, 3)
        measured["switch_s"] = round(warm.compile_time(1) + loading, 3)
    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.background_process")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--placement", choices=("pinned", "shared", "others"), default="pinned")
    parser.add_argument("--cpu", type=int, default=None)
    args = parser.parse_args(argv)
    place(args.placement, args.cpu)
    parent = os.getppid()

    def watch() -> None:  # exit when the run that started this process is gone: nobody would read the result
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()
    started = time.perf_counter()
    try:
        result: dict[str, Any] = {"ok": True, "measured": compile_beside(args.dir)}
    except BaseException as e:  # reported to the run, which compiles in itself instead
        lines = traceback.format_exception(e)
        result = {"ok": False, "error": f"{type(e).__name__}: {e}".strip(), "traceback": "".join(lines[-6:])}
    result["seconds"] = round(time.perf_counter() - started, 3)
    tmp = args.dir / "result.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.replace(args.dir / "result.json")  # the run never reads half a file
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
