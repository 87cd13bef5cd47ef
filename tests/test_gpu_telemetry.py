"""Telemetry on a CUDA device: the MFU peak probe, waits only on timed steps, figures from the GPU,
and the cross-rank non-finite decision over NCCL. Skipped without CUDA (``gpu`` marker)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from runner.config.schema import TelemetryConfig
from runner.telemetry.callback import CompileTelemetry
from runner.telemetry.peak import CACHE_ENV, Peak, reset_memory_peak, resolve_peak
from tests.test_telemetry_callback import TinyModel, _window

pytestmark = pytest.mark.gpu


def test_probe_measures_the_gpu_and_leaves_no_peak_memory(tmp_path: Path) -> None:
    device = torch.device("cuda", 0)
    reset_memory_peak(device)  # first thing in a fresh worker: CUDA is not initialised yet
    bf16 = resolve_peak(device, "bf16-mixed", None, cache=tmp_path)
    assert bf16 is not None and bf16.source == "measured"
    assert 10 < bf16.tflops < 5000, bf16  # a datacenter GPU: hundreds of dense bf16 TFLOP/s
    # The probe's buffers (three 8192 x 8192 matrices) are not the run's peak: the peak is what stays allocated,
    # cuBLAS's workspace (32 MiB on an H200), which the run's own first matmul would allocate too.
    assert torch.cuda.max_memory_allocated(device) == torch.cuda.memory_allocated(device) < 64 * 2**20
    fp32 = resolve_peak(device, "32-true", None, cache=tmp_path)
    assert fp32 is not None and fp32.tflops < bf16.tflops  # tensor cores: bf16 is the faster dtype
    assert resolve_peak(device, "bf16-mixed", None, cache=tmp_path) == Peak(bf16.tflops, "cached")


def test_gpu_fit_waits_only_on_timed_steps_with_figures_from_the_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    pairs, every, steps = 3, 4, 16
    callback = CompileTelemetry(TelemetryConfig(log_every_n_steps=every, speedup_steps=pairs))
    trainer = pl.Trainer(accelerator="gpu", devices=1, max_steps=steps, logger=False, callbacks=[callback],
                         enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False)
    trainer.fit(TinyModel())

    assert callback.clock is not None and callback.clock.asynchronous  # the GPU, not the module's setup device
    figures = callback.figures()
    series = figures["perf/step_series"]
    timed = {p["step"] for p in series if p["timed"]}
    assert timed == {p["step"] for p in _window(series, pairs)} | set(range(0, steps, every))
    assert callback.clock.waits == 2 * len(timed) < 2 * steps  # no wait on the other steps
    assert figures["memory/peak_gib"] == pytest.approx(torch.cuda.max_memory_allocated() / 2**30)
    assert figures["perf/peak_source"] == "measured" and figures["perf/peak_tflops"] > 10
    assert 0 < figures["perf/mfu"] <= 1


@pytest.mark.slow
def test_nonfinite_decision_agrees_across_ranks_over_nccl(tmp_path: Path) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices (the gloo version runs on the CPU: tests/test_nonfinite_ddp.py)")
    from tests.test_nonfinite_ddp import BAD_BATCH, STEPS, _launch

    stop = _launch("stop", tmp_path / "stop", accelerator="cuda")
    assert all(r["error"] is not None and r["steps"] == BAD_BATCH for r in stop.values())
    skip = _launch("skip", tmp_path / "skip", accelerator="cuda")
    assert all(r["steps"] == STEPS and r["skipped"] == [BAD_BATCH + 1] for r in skip.values())
    assert skip[0]["params"] == skip[1]["params"]


def test_peak_memory_is_the_runs_not_the_saved_activation_measurements(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The strategy's setup measures offload on copies of the model (two steps per variant) before
    training; the peak-memory count restarts at fit start, so a run that measures reports the same peak
    as one that does not. The model is parameter-heavy and trains with SGD (no optimizer state): the
    measurement's copy and its gradients (and, before, a float64 vector of them) would be the peak."""
    from functools import partial

    from runner.config.schema import CompileConfig, OffloadConfig, OffloadStrategy, Scope
    from runner.models.gpt import GPT
    from runner.strategy import CompileStrategy
    from runner.training.module import TrainModule
    from tests.helpers import tiny_data

    def tiny_module() -> TrainModule:
        torch.manual_seed(0)
        return TrainModule(GPT(n_layer=2, n_embd=512, n_head=8, block_size=32),
                           optimizer=partial(torch.optim.SGD, lr=1e-3))

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    peaks = {}
    for measure in (True, False):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        callback = CompileTelemetry(TelemetryConfig(speedup_steps=0, peak_tflops=100.0))
        strategy = CompileStrategy(compile=CompileConfig(scope=Scope.none), device="cuda:0", console=False,
                                   offload=OffloadConfig(strategy=OffloadStrategy.bf16, measure=measure))
        trainer = pl.Trainer(strategy=strategy, accelerator="cuda", devices=1, max_steps=4, logger=False,
                             callbacks=[callback], enable_checkpointing=False, enable_model_summary=False,
                             enable_progress_bar=False, limit_val_batches=1, num_sanity_val_steps=0)
        trainer.fit(tiny_module(), tiny_data())
        assert ("offload/saved_bytes" in strategy.figures()) is measure
        peaks[measure] = callback.figures()["memory/peak_gib"]
    assert peaks[True] == pytest.approx(peaks[False], rel=0.05), peaks


def test_nonfinite_guard_reads_the_gpu_every_log_interval(tmp_path: Path) -> None:
    """On CUDA the loss flag stays on the device and is read every log_every_n_steps steps."""
    from runner.config.schema import OnNonFinite
    from runner.reliability import NonFiniteGuard

    guard = NonFiniteGuard(OnNonFinite.stop, tmp_path / "last.ckpt")
    trainer = pl.Trainer(accelerator="gpu", devices=1, max_steps=20, log_every_n_steps=5, logger=False,
                         callbacks=[guard], enable_checkpointing=False, enable_model_summary=False,
                         enable_progress_bar=False)
    trainer.fit(TinyModel())
    assert guard.reads == 20 // 5
