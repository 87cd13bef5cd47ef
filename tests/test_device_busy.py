"""``perf/host_ms_per_step`` and ``perf/device_busy``: CUDA only, a no-op elsewhere. What can be checked without a
GPU: the union of kernel intervals, which steps' host times count, that a CPU fit reports neither figure, and the
profiler fields the device-busy window reads (pinned on every supported torch)."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from runner.telemetry.device_busy import HostDevice, NoHostDevice, build_host_device, busy_share
from runner.torch_internals import observation


def test_busy_share_counts_each_instant_once() -> None:
    assert busy_share([(0, 2), (1, 3), (5, 6)], 10) == pytest.approx(0.4)  # overlap on two streams: 0-3 and 5-6
    assert busy_share([(4, 5), (0, 1), (0.5, 0.75)], 5) == pytest.approx(0.4)  # unsorted, nested
    assert busy_share([], 10) == 0.0 and busy_share([(0, 1)], 0) is None
    assert busy_share([(0, 20)], 10) == 1.0


def test_host_time_counts_only_compiled_steps_not_waited_for() -> None:
    """A timed step waited for the device (its time is the device's too), an eager or compiling step is not the
    compiled step's host work: only the rest count."""
    meter = HostDevice(torch.device("cpu"), start_after=10**9)  # the profiled window never opens here
    for ms, timed, compiled in ((1.0, False, True), (50.0, True, True), (3.0, False, True), (90.0, False, False)):
        meter.step_start(0, "compiled")
        meter.step_end(ms, timed, compiled)
    assert meter.figures() == {"perf/host_ms_per_step": 2.0}


def test_the_summary_shows_both_where_they_were_measured() -> None:
    from runner.telemetry.report import summary_rows

    rows = dict(summary_rows({"perf/host_ms_per_step": 1.25, "perf/device_busy": 0.875, "perf/step_ms": 4.0}))
    assert "1.25" in rows["host per step [ms]"] and "0.875" in rows["device busy"]
    assert not {"host per step [ms]", "device busy"} & set(dict(summary_rows({"perf/step_ms": 4.0})))


def test_nothing_is_measured_off_cuda() -> None:
    meter = build_host_device(torch.device("cpu"))
    assert type(meter) is NoHostDevice
    meter.step_start(100, "compiled")
    meter.step_end(1.0, False, True)
    assert meter.figures() == {}
    assert isinstance(build_host_device(torch.device("cuda", 0)), HostDevice)


def test_a_cpu_fit_reports_neither_figure(tmp_path: object) -> None:
    from runner.config.schema import CompileConfig, Scope, TelemetryConfig
    from runner.strategy import CompileStrategy
    from runner.telemetry import CompileTelemetry
    from tests.helpers import tiny_data, tiny_module

    telemetry = CompileTelemetry(TelemetryConfig(speedup_steps=0))
    trainer = L.Trainer(strategy=CompileStrategy(compile=CompileConfig(scope=Scope.step, backend="eager")),
                        accelerator="cpu", devices=1, max_steps=3, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, limit_val_batches=0, callbacks=[telemetry])
    trainer.fit(tiny_module(), tiny_data())
    figures = telemetry.figures()
    assert "perf/step_ms" in figures  # the fit was measured
    assert not {"perf/host_ms_per_step", "perf/device_busy", "perf/device_busy_steps"} & set(figures)


def test_the_profiler_fields_the_window_reads_are_pinned() -> None:
    """``kernel_intervals`` reads each event's ``device_type`` and ``time_range``: a CPU profile has events with
    both, and none of them is a device kernel."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU])
    prof.start()
    torch.randn(64, 64) @ torch.randn(64, 64)
    prof.stop()
    events = list(prof.events())
    assert events and all(e.time_range.end >= e.time_range.start for e in events)
    assert observation.kernel_intervals(prof) == []
