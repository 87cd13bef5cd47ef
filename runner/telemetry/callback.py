"""``CompileTelemetry``: the Lightning callback that measures what compilation did and bought.

Everything runs in callbacks, outside compiled code, so logging cannot cause graph breaks or recompiles. On an
asynchronous device only the speedup pairs and one sampled step per logging interval are timed (each costs two
waits for the device); under DDP the throughput is the sum of every rank's own measured rate. The step clock, the
loggers' sinks and the gathers over ranks are this callback's parts."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from runner.config.schema import TelemetryConfig
from runner.metrics import PER_RANK
from runner.stack import Eager, StepMode, stack_of
from runner.stack.console import CompileProgress
from runner.strategy.progress_sink import progress_sink
from runner.telemetry.advice import UNKNOWN_BATCHES, Batches, advice_lines
from runner.telemetry.collector import CompileCollector
from runner.telemetry.device_busy import NoHostDevice, build_host_device
from runner.telemetry.peak import ACHIEVED, Peak, forget_peak, reset_memory_peak, resolve_peak
from runner.telemetry.speedup import SPEEDUP_KEYS, SpeedupMeter
from runner.telemetry.throughput import BatchCounts, StepFlops, batch_counts, peak_memory_gib
from runner.telemetry.trace import StructuredTrace

log = logging.getLogger(__name__)


class StepClock:
    """Host-clock step timer; ``wait`` blocks until the device has finished its queued work (default
    ``torch.cuda.synchronize`` on CUDA, nothing on a synchronous device; tests count its calls)."""

    def __init__(self, device: torch.device, wait: Callable[[], None] | None = None) -> None:
        if wait is None and device.type == "cuda":
            wait = partial(torch.cuda.synchronize, device)
        self.wait = wait
        self.waits = 0  # How many times the clock waited for the device (two per timed step).
        self._t0: float | None = None
        self._timed = False

    @property
    def asynchronous(self) -> bool:
        """Whether the device queues work, so a step's host time is right only after a wait."""
        return self.wait is not None

    def _wait(self) -> None:
        if self.wait is not None:
            self.waits += 1
            self.wait()

    def start(self, timed: bool) -> None:
        """Start a step; ``timed``: its time will be used, so wait for earlier work first."""
        self._timed = timed or not self.asynchronous
        if timed:
            self._wait()
        self._t0 = time.perf_counter()

    def stop(self) -> tuple[float, bool]:
        """End the step: (milliseconds on the host clock, whether that is the step's real time)."""
        if self._t0 is None:
            raise RuntimeError("StepClock.stop() without start()")
        if self._timed:
            self._wait()
        ms = (time.perf_counter() - self._t0) * 1000.0
        self._t0 = None
        return ms, self._timed


# The figures every rank must share: ranks that compile differently deadlock or diverge.
AGREEING_FIELDS = frozenset({"compile/graphs", "compile/recompiles", "compile/graph_breaks"})

# The throughput figures, each summed over ranks, and the count of a step (``BatchCounts``) each is the rate of.
RATE_OF = {"perf/samples_per_s": "samples", "perf/tokens_per_s": "tokens", "perf/examples_per_s": "examples",
           "perf/loss_tokens_per_s": "loss_tokens"}
Rates = dict[str, float | None]  # Each of ``RATE_OF``; None where no rank measured that rate.


def gather_rank_figures(strategy: pl.strategies.Strategy, own: dict[str, Any],
                        device: torch.device) -> tuple[dict[str, Any], Rates]:
    """One all-gather: ``ranks/<figure>`` lists, ``ranks/compiles_agree`` and the rates summed over ranks."""
    fields = (*PER_RANK, *(k for k in RATE_OF if k not in PER_RANK))  # PER_RANK: what each rank reports
    local = torch.tensor([float(own.get(k) or 0.0) for k in fields], dtype=torch.float64, device=device)
    rows = strategy.all_gather(local).reshape(-1, len(fields)).cpu().tolist()
    per_rank: dict[str, Any] = {PER_RANK[key]: [row[i] for row in rows] for i, key in enumerate(PER_RANK)}
    total = {key: sum(row[fields.index(key)] for row in rows) or None for key in RATE_OF}
    compiles = [tuple(row[i] for i, k in enumerate(PER_RANK) if k in AGREEING_FIELDS) for row in rows]
    per_rank["ranks/compiles_agree"] = len(set(compiles)) == 1
    return per_rank, total


def scalars(figures: dict[str, Any]) -> dict[str, float]:
    """The loggable part of the figures: finite numbers (bools as 0/1); lists and None dropped."""
    out: dict[str, float] = {}
    for key, value in figures.items():
        if isinstance(value, bool) or (isinstance(value, (int, float)) and math.isfinite(value)):
            out[key] = float(value)
    return out


def _with_fix(entry: dict[str, Any]) -> str:
    fix = entry.get("fix")
    return f"{entry.get('reason')} | fix: {fix}" if fix else str(entry.get("reason"))


def reason_rows(figures: dict[str, Any]) -> list[list[Any]]:
    """One row per recompile, graph-break site and eager fallback: kind, name, location, step, count, reason."""
    rows: list[list[Any]] = []
    for r in figures.get("compile/recompile_reasons") or []:
        rows.append(["recompile", r.get("name"), r.get("location"), r.get("step"), 1, _with_fix(r)])
    for b in figures.get("compile/graph_break_reasons") or []:
        rows.append(["graph_break", None, b.get("user_frame"), None, b.get("count"), _with_fix(b)])
    for f in figures.get("compile/fallback_reasons") or []:
        rows.append(["fallback", f.get("name"), None, None, 1, f.get("reason")])
    return rows


def log_reason_table(trainer: pl.Trainer, figures: dict[str, Any]) -> None:
    """Reasons as a ``wandb.Table`` on every WandbLogger (none: nothing, and wandb is not imported)."""
    from lightning.pytorch.loggers import WandbLogger

    wandb_loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
    if not wandb_loggers:
        return
    import wandb

    columns = ["kind", "name", "location", "step", "count", "reason"]
    # wandb.Table wants one type per column; None would make "step"/"count" mixed-type.
    data = [["" if v is None else v for v in row] for row in reason_rows(figures)]
    for logger in wandb_loggers:
        logger.experiment.log({"compile/reasons": wandb.Table(columns=list[Any](columns), data=data)})


def write_events_text(path: Path, figures: dict[str, Any]) -> None:
    """``compile_events.txt``: every compile event with its step and duration, then every reason."""
    lines = ["# compile events: step, kind, seconds, name"]
    for e in figures.get("compile/events") or []:
        lines.append(f"step {e.get('step')}\t{e.get('kind')}\t{e.get('duration_s', 0.0):.2f} s\t{e.get('name')}")
    lines += ["", "# reasons: kind, name, location, step, count, reason"]
    for kind, name, location, step, count, reason in reason_rows(figures):
        lines.append(f"{kind}\t{name or '-'}\t{location or '-'}\tstep {step}\tx{count}\n    {reason}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


# A step the compile beside the run holds eager: before its switch, or back to eager after it (not the meter's).
BESIDE_MODES: dict[Eager | None, str] = {Eager.beside: "background", Eager.reverted: "reverted"}


class CompileTelemetry(pl.Callback):
    """Compile telemetry, live compile progress and the in-run eager-vs-compiled speedup. ``clock``: the step timer
    (None: one for the run's device); ``batches``: what the run's batches are, for a recompile's fix."""

    def __init__(self, cfg: TelemetryConfig, run_dir: Path | None = None, heartbeat_s: float = 5.0,
                 clock: StepClock | None = None, batches: Batches = UNKNOWN_BATCHES) -> None:
        super().__init__()
        self.cfg = cfg
        self.batches = batches
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.meter = SpeedupMeter(pairs=cfg.speedup_steps)
        self.collector: CompileCollector | None = None
        self.progress: CompileProgress | None = None
        self.flops = StepFlops()
        self._counts = BatchCounts()
        self._world_rates: Rates | None = None  # every rate, summed over ranks
        self._per_rank: dict[str, Any] = {}  # ranks/<figure>: one value per rank, gathered at the end of fit
        self._device = torch.device("cpu")
        self.peak: Peak | None = None
        self._module: torch.nn.Module | None = None
        self._step_state: tuple[str, Eager | None, int] | None = None  # mode, eager reason held, events before
        # The step mode the eager steps are asked of: the runner strategy's, from the fit's start.
        self.step_mode = StepMode()
        self._sampled_step: int | None = None  # the global step whose first batch was timed for step_ms
        self._final: dict[str, Any] | None = None
        self.trace = StructuredTrace(self.run_dir, cfg.trace)
        self._carried: dict[str, Any] = {}  # the speedup measured before a resume (from the checkpoint)
        self._compiled_before_s = 0.0  # seconds compiling before a resume (from the checkpoint)
        self._held = False
        self.host_device: NoHostDevice = NoHostDevice()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Resolve the device, the MFU peak and the clock (collecting starts in ``on_fit_start``)."""
        if stage != "fit" or self.progress is not None:
            return
        # The strategy's device, not pl_module.device: Lightning moves the module there only after
        # the setup hooks, so the module is still on the CPU here even in a GPU run.
        self._device = trainer.strategy.root_device
        self._module = pl_module
        self.flops.recount()  # for this module, at its first figures
        # Before the collector starts and before anything compiles: the probe is plain eager matmuls.
        self.peak = resolve_peak(self._device, str(trainer.precision), self.cfg.peak_tflops)
        if self.clock is None:
            self.clock = StepClock(self._device)
        self.host_device = build_host_device(self._device)  # perf/host_ms_per_step, perf/device_busy: CUDA only
        self.progress = CompileProgress(progress_sink(trainer), interval_s=self.heartbeat_s)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Start collecting after the strategy's setup (whose saved-activation measurement compiles
        copies of the step that are not the run's) and before anything of the run compiles."""
        if self.collector is None and self.progress is not None:
            # A runner strategy with its own console already prints each compile: print them once.
            stack = stack_of(trainer)
            self.step_mode = stack.step_mode if stack is not None else StepMode()
            console = stack is not None and stack.console
            self.collector = CompileCollector(listeners=() if console else (self.progress,),
                                              batches=self.batches).start()
            self.trace.start()
            reset_memory_peak(self._device)  # memory/peak_gib: the run's, not the measurement's before it

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Recount trainable parameters at this epoch's first figures: finetuning callbacks (Lightning's
        ``BaseFinetuning``) freeze and unfreeze at epoch starts, possibly after this hook runs."""
        self.flops.recount()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Pick this step's stance, start the timer (waiting for the device only on timed steps)."""
        if self.collector is None or self.clock is None:
            return
        self._counts = batch_counts(batch)  # every step: document batches vary in length
        why = self.step_mode.eager_because()  # eager for the stack's own reason (beside the run, CUDA-graph warm-up)
        mode = BESIDE_MODES[why] if why in BESIDE_MODES else self.meter.next_mode()
        held = {"eager": Eager.pair, "flops": Eager.flops}.get(mode)
        if held is not None:
            self.step_mode.hold(held)
        if mode == "flops":
            self.flops.start()
        step = trainer.global_step
        self.collector.step = step
        # One sampled step per logging interval feeds step_ms and throughput; with gradient
        # accumulation several batches share a global step: only the first is sampled.
        sampled = step % max(1, self.cfg.log_every_n_steps) == 0 and step != self._sampled_step
        if sampled:
            self._sampled_step = step
        self._step_state = (mode, held, len(self.collector.events))
        self._held = why is Eager.warmup  # the speedup's warm-up counts only the steps after it
        self.host_device.step_start(step, mode)
        self.clock.start(timed=sampled or self.meter.wants_time(mode))

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Stop the timer, restore the stance, record the step, log every N steps."""
        if self.collector is None or self._step_state is None or self.clock is None:
            return
        ms, timed = self.clock.stop()
        mode, _, n_events = self._step_state
        self._end_step_state()
        counts = self._counts
        samples, tokens = counts.samples, counts.tokens
        if mode == "flops":
            self.flops.counted(samples, tokens)
        kinds = {e["kind"] for e in self.collector.events[n_events:]}
        compiling = bool(self.collector.compiling())
        compiled = bool(kinds) or compiling
        recording_only = kinds == {"cudagraph_recording"} and not compiling
        self.host_device.step_end(ms, timed, compiled=mode == "compiled" and not compiled)
        self.meter.record(self.collector.step or 0, mode, ms, compiled, samples=samples, tokens=tokens, timed=timed,
                          held=self._held, recording_only=recording_only, examples=counts.examples,
                          loss_tokens=counts.loss_tokens)
        step = trainer.global_step
        if step % max(1, self.cfg.log_every_n_steps) == 0:
            if trainer.world_size > 1:  # every rank reaches this step: the all-reduce is matched
                # Each rate summed over ranks; a rate no rank measured stays None.
                own = torch.tensor([r or 0.0 for r in self._own_rates().values()], dtype=torch.float64,
                                   device=self._device)
                total = trainer.strategy.reduce(own, reduce_op="sum").tolist()
                self._world_rates = {k: v or None for k, v in zip(RATE_OF, total, strict=True)}
            if trainer.is_global_zero:
                live = scalars(self._figures(series=False))
                for logger in trainer.loggers:  # loggers are rank-zero-only themselves
                    logger.log_metrics(live, step=step)

    def _end_step_state(self) -> None:
        """Leave the step: stop the FLOP counter and restore the stance (also after an exception)."""
        if self._step_state is None:
            return
        mode, held, _ = self._step_state
        self._step_state = None
        if mode == "flops":
            self.flops.stop()
        if held is not None:
            self.step_mode.release(held)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Final figures to the loggers, reasons to wandb and ``compile_events.txt``."""
        if self.collector is None:
            return
        if trainer.world_size > 1:  # each rank's own figures and rates (not the sums), one collective at the end
            own = {**self._figures(series=False), **self._own_rates()}
            self._per_rank, self._world_rates = gather_rank_figures(trainer.strategy, own, self._device)
        self._finish()
        figures = self.figures()
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(scalars(figures), step=trainer.global_step)
            log_reason_table(trainer, figures)
            if self.run_dir is not None:
                write_events_text(self.run_dir / "compile_events.txt", figures)
            for line in advice_lines(figures, batches=self.batches):  # what could not be compiled, where, the fix
                log.warning("compile: %s", line)
        if figures.get("perf/peak_source") == ACHIEVED and self.peak is not None and self.peak.source == "cached":
            forget_peak(self._device, str(trainer.precision))  # the cached peak was too low: measure anew

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Always runs (also after an exception): unhook from torch, stop the heartbeat thread."""
        if stage == "fit":
            self._finish()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """A step that raised must not leave its eager hold behind."""
        self._end_step_state()

    def _finish(self) -> None:
        self._end_step_state()
        if self.collector is not None and self._final is None:
            self._final = self._figures()
            self.collector.stop()
        self.host_device.close()
        if self.progress is not None:
            self.progress.close()
        self.trace.stop()

    # -- resume: a speedup measured and the compile time spent before the checkpoint are reported, not lost -------
    def state_dict(self) -> dict[str, Any]:
        """For the checkpoint: the speedup figures (this run's once measured, else those it carries) and the seconds
        compiled so far, the parts before a resume included."""
        figures = self._figures(series=False)
        own = {k: v for k, v in figures.items() if k in SPEEDUP_KEYS} if self.meter.done else {}
        speedup = own if "perf/speedup_x" in own else self._carried
        return {**({"speedup": speedup} if speedup else {}), "compile_time_s": figures.get("compile/time_s", 0.0)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A resumed run shows the checkpoint's speedup figures when it measures none itself, and adds its compile
        time to its own."""
        self._carried = dict(state_dict.get("speedup") or {})
        self._compiled_before_s = float(state_dict.get("compile_time_s") or 0.0)

    def figures(self) -> dict[str, Any]:
        """The flat figures dict (namespaced keys with units, plus reason lists); final after fit."""
        return {**self._final, **self.trace.figures()} if self._final is not None else self._figures()

    def _figures(self, series: bool = True) -> dict[str, Any]:
        figures: dict[str, Any] = dict(self.collector.figures()) if self.collector is not None else {}
        if self._compiled_before_s:  # the whole run's compile time: the parts before the resume too
            # Unrounded: the first part reported this very value as its compile/time_s (rounded, it could exceed it).
            figures["compile/time_before_resume_s"] = self._compiled_before_s
            figures["compile/time_s"] = figures.get("compile/time_s", 0.0) + self._compiled_before_s
        figures.update(self.meter.figures(compile_time_s=figures.get("compile/time_s", 0.0), series=series))
        # Resumed before this run's pairs finished: the speedup measured before the resume, unless nothing compiles
        # since (a resume under compile=eager: its steps are no compiled steps, and the figure is no longer the run's).
        if "perf/speedup_x" not in figures and self._carried and figures["perf/speedup_status"] != "nothing compiled":
            figures.update(self._carried)
            figures["perf/speedup_status"] = "measured before the resume"
        figures["memory/peak_gib"] = peak_memory_gib(self._device)
        figures.update(self.host_device.figures())
        figures.update(self._per_rank)
        # Throughput over the steps perf/step_ms is the median of (SpeedupMeter.rate), summed over ranks.
        rates = self._world_rates or self._own_rates()
        figures.update({k: r for k, r in rates.items() if r})
        if self.peak is not None:
            figures["perf/peak_tflops"], figures["perf/peak_source"] = self.peak.tflops, self.peak.source
        figures.update(self.flops.figures(self._module, self._counts.samples, self._counts.tokens,
                                          rate=self.meter.rate, peak=self.peak))
        return figures

    def _own_rates(self) -> Rates:
        return {key: self.meter.rate(count) for key, count in RATE_OF.items()}
