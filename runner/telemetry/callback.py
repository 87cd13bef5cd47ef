"""``CompileTelemetry``: the Lightning callback that measures what compilation did and bought.

Per training step (``on_train_batch_start`` -> ``on_train_batch_end`` = forward, backward and
optimizer step) it chooses the Dynamo stance (compiled, or ``force_eager`` for the interleaved eager
steps of :class:`SpeedupMeter`), times the step, and every ``log_every_n_steps`` sends the compile,
perf and memory figures to every logger of the trainer. At the end of training it writes
``compile_events.txt`` into the run dir and the reasons table to wandb; :meth:`figures` returns the
final flat dict for :func:`runner.telemetry.report.write_report`.

Everything runs in callbacks, outside compiled code: logging cannot cause graph breaks or recompiles.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from runner import torch_internals as ti
from runner.config.schema import TelemetryConfig
from runner.telemetry import sinks
from runner.telemetry.collector import CompileCollector
from runner.telemetry.progress import CompileProgress
from runner.telemetry.speedup import SpeedupMeter
from runner.telemetry.throughput import (
    FlopCounter,
    batch_counts,
    default_peak_tflops,
    estimate_flops,
    peak_memory_gib,
    synchronize,
)


class CompileTelemetry(pl.Callback):
    """Compile telemetry, live compile progress and the in-run eager-vs-compiled speedup.

    Args:
        cfg: the ``telemetry`` config node (log interval, speedup pairs, MFU peak).
        run_dir: where ``compile_events.txt`` is written; None writes nothing.
        heartbeat_s: seconds between "still compiling" lines.
    """

    def __init__(self, cfg: TelemetryConfig, run_dir: Path | None = None, heartbeat_s: float = 5.0) -> None:
        super().__init__()
        self.cfg = cfg
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.heartbeat_s = heartbeat_s
        self.meter = SpeedupMeter(pairs=cfg.speedup_steps)
        self.collector: CompileCollector | None = None
        self.progress: CompileProgress | None = None
        self._flops = FlopCounter()
        self._flops_per_step: float | None = None
        self._flops_per_unit: float | None = None  # per token (or per sample without a sequence dim)
        self._flops_source = "none"
        self._counts: tuple[int | None, int | None] = (None, None)
        self._world = 1
        self._device = torch.device("cpu")
        self._peak_tflops: float | None = cfg.peak_tflops
        self._module: torch.nn.Module | None = None
        self._step_state: tuple[str, Any, float, int] | None = None  # mode, prior stance, t0, events
        self._final: dict[str, Any] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Start collecting before the first step compiles anything."""
        if stage != "fit" or self.collector is not None:
            return
        self.progress = CompileProgress(sinks.progress_sink(trainer), interval_s=self.heartbeat_s)
        self.collector = CompileCollector(listeners=(self.progress,)).start()
        self._world = max(1, trainer.world_size)
        self._device = pl_module.device
        self._module = pl_module
        if self._peak_tflops is None:
            self._peak_tflops = default_peak_tflops(self._device, str(trainer.precision))

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Pick this step's stance, start the timer."""
        if self.collector is None:
            return
        self._counts = batch_counts(batch)  # every step: document batches vary in length
        mode = self.meter.next_mode()
        prior = ti.force_eager_stance() if mode in ("eager", "flops") else None
        if mode == "flops":
            self._flops.start()
        self.collector.step = trainer.global_step
        synchronize(self._device)
        self._step_state = (mode, prior, time.perf_counter(), len(self.collector.events))

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Stop the timer, restore the stance, record the step, log every N steps."""
        if self.collector is None or self._step_state is None:
            return
        synchronize(self._device)
        mode, prior, t0, n_events = self._step_state
        ms = (time.perf_counter() - t0) * 1000.0
        self._end_step_state()
        samples, tokens = self._counts
        if mode == "flops" and self._flops.total and (tokens or samples):
            self._flops_per_step, self._flops_source = float(self._flops.total), "flop_counter"
            self._flops_per_unit = self._flops_per_step / float(tokens or samples or 1)
        compiled = len(self.collector.events) > n_events or bool(self.collector.compiling())
        self.meter.record(self.collector.step or 0, mode, ms, compiled, samples=samples, tokens=tokens)
        step = trainer.global_step
        every = max(1, self.cfg.log_every_n_steps)
        if step % every == 0 and trainer.is_global_zero:
            sinks.log_scalars(trainer, sinks.scalars(self.figures()), step)

    def _end_step_state(self) -> None:
        """Leave the step: stop the FLOP counter and restore the stance (also after an exception)."""
        if self._step_state is None:
            return
        mode, prior, _, _ = self._step_state
        self._step_state = None
        if mode == "flops":
            self._flops.stop()
        if prior is not None:
            ti.restore_stance(prior)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Final figures to the loggers, reasons to wandb and ``compile_events.txt``."""
        if self.collector is None:
            return
        self._finish()
        figures = self.figures()
        if trainer.is_global_zero:
            sinks.log_scalars(trainer, sinks.scalars(figures), trainer.global_step)
            sinks.log_reason_table(trainer, figures)
            if self.run_dir is not None:
                sinks.write_events_text(self.run_dir / "compile_events.txt", figures)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Always runs (also after an exception): unhook from torch, stop the heartbeat thread."""
        if stage == "fit":
            self._finish()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """A step that raised must not leave the process in force_eager."""
        self._end_step_state()

    def _finish(self) -> None:
        self._end_step_state()
        if self.collector is not None and self._final is None:
            self._final = self._figures()
            self.collector.stop()
        if self.progress is not None:
            self.progress.close()

    # -- figures -----------------------------------------------------------------------------
    def figures(self) -> dict[str, Any]:
        """The flat figures dict (namespaced keys with units, plus reason lists); final after fit."""
        if self._final is not None:
            return dict(self._final)
        return self._figures()

    def _figures(self) -> dict[str, Any]:
        figures: dict[str, Any] = dict(self.collector.figures()) if self.collector is not None else {}
        figures.update(self.meter.figures(compile_time_s=figures.get("compile/time_s", 0.0)))
        figures["memory/peak_gib"] = peak_memory_gib(self._device)
        # Throughput over recent compiled steps (total work / total time: right for varying lengths).
        samples_rate, tokens_rate = self.meter.rate("samples"), self.meter.rate("tokens")
        if samples_rate:
            figures["perf/samples_per_s"] = samples_rate * self._world
        if tokens_rate:
            figures["perf/tokens_per_s"] = tokens_rate * self._world
        samples, tokens = self._counts
        per_unit, flops = self._flops_per_unit, self._flops_per_step
        if per_unit is None and self._module is not None:
            flops, self._flops_source = estimate_flops(self._module, samples, tokens), "6*params*tokens"
            per_unit = flops / float(tokens or samples or 1) if flops else None
        if flops and per_unit:
            figures["perf/tflop_per_step"] = flops / 1e12
            figures["perf/flops_source"] = self._flops_source
            unit_rate = tokens_rate if tokens else samples_rate  # per rank, in the unit FLOPs were counted per
            if unit_rate and self._peak_tflops:
                figures["perf/mfu"] = per_unit * unit_rate / (self._peak_tflops * 1e12)
        if self._peak_tflops:
            figures["perf/peak_tflops"] = self._peak_tflops
        return figures
