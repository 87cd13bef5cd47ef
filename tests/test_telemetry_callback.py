"""CompileTelemetry in a real (short) Lightning fit: a compiled module, CPU, CSVLogger."""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from runner.config.schema import TelemetryConfig
from runner.telemetry.callback import CompileTelemetry, StepClock
from runner.telemetry.peak import CACHE_ENV, Peak
from runner.telemetry.report import format_summary, write_report
from runner.torch_internals import runtime


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class TinyModel(pl.LightningModule):
    """A token model (embedding + MLP) whose net is compiled; logs nothing inside the compiled part."""

    def __init__(self) -> None:
        super().__init__()
        net = nn.Sequential(nn.Embedding(32, 16), nn.Flatten(), nn.Linear(16 * 8, 32), nn.ReLU(), nn.Linear(32, 4))
        self.net = torch.compile(net, backend="aot_eager")

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        tokens, target = batch
        return nn.functional.cross_entropy(self.net(tokens), target)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        g = torch.Generator().manual_seed(0)
        tokens, target = torch.randint(0, 32, (256, 8), generator=g), torch.randint(0, 4, (256,), generator=g)
        data = torch.utils.data.TensorDataset(tokens, target)
        return torch.utils.data.DataLoader(data, batch_size=8)


def _fit(tmp_path: Path, cfg: TelemetryConfig, max_steps: int, clock: StepClock | None = None,
         after: list[pl.Callback] | None = None) -> CompileTelemetry:
    callback = CompileTelemetry(cfg, run_dir=tmp_path, heartbeat_s=0.05, clock=clock)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        logger=CSVLogger(tmp_path, name="csv"),
        callbacks=[callback, *(after or [])],
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(TinyModel())
    assert runtime.current_stance() == "default"  # eager steps never leak force_eager
    return callback


def _window(series: list[dict], pairs: int) -> list[dict]:
    """The interleaved eager/compiled steps, from the step series: the first 2 x pairs timed
    eager/compiled steps from the first eager one on (a step that compiled is shown as "compile")."""
    first = next(i for i, p in enumerate(series) if p["mode"] == "eager")
    return [p for p in series[first:] if p["mode"] in ("eager", "compiled") and p["timed"]][: 2 * pairs]


# FLOPs of one TinyModel step as FlopCounterMode counts them: the two Linear layers' matmuls,
# forward (2*m*n*k) plus backward (input and weight gradients: twice that); batch 8.
TINY_STEP_FLOPS = 3 * (2 * 8 * 128 * 32 + 2 * 8 * 32 * 4)


def test_callback_in_real_fit_logs_keys_and_speedup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    pairs = 3
    callback = _fit(tmp_path, TelemetryConfig(log_every_n_steps=2, speedup_steps=pairs), max_steps=14)

    figures = callback.figures()
    assert figures["compile/frames"] >= 1
    assert figures["compile/graphs"] >= 1
    assert figures["compile/time_s"] > 0
    assert figures["compile/recompiles"] == 0
    assert figures["compile/graph_breaks"] == 0
    assert figures["compile/guards_total"] > 0
    assert figures["compile/backward_s"] > 0  # the lazy backward compile was seen
    assert figures["memory/peak_gib"] > 0
    kinds = [e["kind"] for e in figures["compile/events"]]
    assert kinds.count("compile") >= 1 and kinds.count("backward") == 1
    series = figures["perf/step_series"]
    modes = [p["mode"] for p in series]
    assert modes.count("eager") == pairs and modes.count("flops") == 1

    # The speedup figures are the meter's own records, combined as documented: ABBA pairs, the
    # median of each pair's eager/compiled ratio of time per token, medians of each side.
    window = _window(series, pairs)
    assert [p["mode"] for p in window] == ["eager", "compiled", "compiled", "eager", "eager", "compiled"]
    ratios = []
    for a, b in zip(window[::2], window[1::2], strict=True):
        eager, comp = (a, b) if a["mode"] == "eager" else (b, a)
        ratios.append((eager["ms"] / eager["tokens"]) / (comp["ms"] / comp["tokens"]))
    assert figures["perf/speedup_x"] == pytest.approx(statistics.median(ratios))
    q = statistics.quantiles(ratios, n=4, method="inclusive")
    assert (figures["perf/speedup_p25_x"], figures["perf/speedup_p75_x"]) == pytest.approx((q[0], q[2]))
    eager_ms = statistics.median(p["ms"] for p in window if p["mode"] == "eager")
    compiled_ms = statistics.median(p["ms"] for p in window if p["mode"] == "compiled")
    assert figures["perf/eager_step_ms"] == pytest.approx(eager_ms)
    assert figures["perf/compiled_step_ms"] == pytest.approx(compiled_ms)
    # Break-even: compile time over the time a compiled step saves at the measured speedup ("never"
    # when the speedup is not above 1, whatever the two medians say).
    saved_s = compiled_ms * (figures["perf/speedup_x"] - 1) / 1000.0
    expected = math.ceil(figures["compile/time_s"] / saved_s) if saved_s > 0 else math.inf
    assert figures["perf/break_even_step"] == expected

    # Throughput: the timed compiled steps' work per step over their median time, perf/step_ms, so that a rate and
    # the step time agree (8 samples a step); 8 tokens per sample.
    compiled = [p for p in series if p["mode"] == "compiled" and p["timed"]]
    assert figures["perf/step_ms"] == pytest.approx(statistics.median(p["ms"] for p in compiled))
    assert figures["perf/samples_per_s"] == pytest.approx(8 / (figures["perf/step_ms"] / 1000.0))
    assert figures["perf/tokens_per_s"] == pytest.approx(8 * figures["perf/samples_per_s"])
    assert figures["perf/examples_per_s"] == pytest.approx(figures["perf/samples_per_s"])  # a row is an example
    # FLOPs counted on the eager step, and MFU = FLOP/s achieved / the peak measured on this machine.
    assert figures["perf/flops_source"] == "flop_counter"
    assert figures["perf/tflop_per_step"] * 1e12 == pytest.approx(TINY_STEP_FLOPS)
    assert figures["perf/peak_source"] == "measured" and figures["perf/peak_tflops"] > 0
    achieved = TINY_STEP_FLOPS / 64 * figures["perf/tokens_per_s"]
    assert figures["perf/mfu"] == pytest.approx(achieved / (figures["perf/peak_tflops"] * 1e12))
    assert 0 < figures["perf/mfu"] <= 1

    metrics = list(csv.DictReader((tmp_path / "csv" / "version_0" / "metrics.csv").open()))
    logged = {k for row in metrics for k, v in row.items() if v not in ("", None)}
    for key in (
        "compile/graphs", "compile/recompiles", "compile/graph_breaks", "compile/guards_total", "compile/time_s",
        "perf/step_ms", "perf/eager_step_ms", "perf/compiled_step_ms", "perf/speedup_x",
        "perf/samples_per_s", "perf/tokens_per_s", "perf/mfu", "perf/peak_tflops", "memory/peak_gib",
    ):
        assert key in logged, key
    # Logged exactly when finite (loggers take numbers; "never" is only in the report).
    assert ("perf/break_even_step" in logged) == math.isfinite(expected)
    assert "Sequential.forward" in (tmp_path / "compile_events.txt").read_text()

    write_report(tmp_path, figures)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["perf/speedup_x"] == pytest.approx(figures["perf/speedup_x"])
    assert report["perf/peak_source"] == "measured"
    assert (tmp_path / "step_times.png").stat().st_size > 1000
    assert "speedup [x]" in format_summary(figures)


def test_only_steps_whose_time_is_used_wait_for_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An asynchronous device (CUDA) is waited for only around the timed steps: the speedup pairs and
    one sampled step per logging interval; every other step runs without a wait. On the CPU the
    clock's wait is the seam: it counts calls instead of calling torch.cuda.synchronize."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    waits: list[int] = []
    clock = StepClock(torch.device("cpu"), wait=lambda: waits.append(1))
    pairs, every, steps = 3, 4, 16
    callback = _fit(tmp_path, TelemetryConfig(log_every_n_steps=every, speedup_steps=pairs), steps, clock=clock)

    series = callback.figures()["perf/step_series"]
    assert len(series) == steps
    timed = {p["step"] for p in series if p["timed"]}
    pair_steps = {p["step"] for p in _window(series, pairs)}
    assert len(pair_steps) == 2 * pairs
    assert timed == pair_steps | set(range(0, steps, every))  # nothing else waited
    assert len(waits) == clock.waits == 2 * len(timed) < 2 * steps
    # Step time and throughput come from timed compiled steps only.
    figures = callback.figures()
    compiled = [p for p in series if p["mode"] == "compiled" and p["timed"]]
    assert figures["perf/step_ms"] == pytest.approx(statistics.median(p["ms"] for p in compiled))
    assert any(p["mode"] == "compiled" and not p["timed"] for p in series)


class FreezeEmbeddingAtEpoch1(pl.Callback):
    """What a finetuning callback does at an epoch start (placed after the telemetry, so it runs later)."""

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch == 1:
            pl_module.net._orig_mod[0].weight.requires_grad_(False)  # type: ignore[index]


def test_estimated_flops_follow_the_trainable_parameters_of_each_epoch(tmp_path: Path) -> None:
    """Without a FLOP-counting step (no speedup pairs), FLOPs per step are 6 x trainable parameters x
    tokens; the count is kept through an epoch and taken again in the next, after any freezing."""
    steps_per_epoch = 32  # 256 samples, batch 8
    callback = _fit(tmp_path, TelemetryConfig(log_every_n_steps=4, speedup_steps=0, peak_tflops=1.0),
                    steps_per_epoch + 8, after=[FreezeEmbeddingAtEpoch1()])
    figures = callback.figures()
    tokens = 8 * 8  # [batch 8, seq 8] token ids
    embedding, rest = 32 * 16, (16 * 8 * 32 + 32) + (32 * 4 + 4)
    assert figures["perf/flops_source"] == "6*params*tokens"
    assert figures["perf/tflop_per_step"] * 1e12 == pytest.approx(6 * rest * tokens)
    rows = list(csv.DictReader((tmp_path / "csv" / "version_0" / "metrics.csv").open()))
    logged = [float(r["perf/tflop_per_step"]) * 1e12 for r in rows if r.get("perf/tflop_per_step")]
    assert logged[0] == pytest.approx(6 * (embedding + rest) * tokens)  # epoch 0: everything trains
    assert logged[-1] == pytest.approx(6 * rest * tokens)


def test_device_is_the_strategys_not_the_modules_at_setup() -> None:
    """Lightning moves the module to its device only after the setup hooks: a GPU run's module is
    still on the CPU there. The timing waits, peak memory and the MFU probe must use the strategy's
    root device. (A stand-in trainer with a CUDA root device; nothing touches CUDA with a given peak.)"""
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 1)), precision="bf16-mixed",
                              is_global_zero=True, progress_bar_callback=None)
    module = TinyModel()
    assert module.device.type == "cpu"
    callback = CompileTelemetry(TelemetryConfig(peak_tflops=123.0))
    callback.setup(trainer, module, "fit")  # type: ignore[arg-type]
    try:
        assert callback._device == torch.device("cuda", 1)
        assert callback.clock is not None and callback.clock.asynchronous  # it will wait on that device
        assert callback.peak == Peak(123.0, "given")
    finally:
        callback.teardown(trainer, module, "fit")  # type: ignore[arg-type]
