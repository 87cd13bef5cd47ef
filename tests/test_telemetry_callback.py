"""CompileTelemetry in a real (short) Lightning fit: a compiled module, CPU, CSVLogger."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from runner import torch_internals as ti
from runner.config.schema import TelemetryConfig
from runner.telemetry.callback import CompileTelemetry
from runner.telemetry.report import format_summary, write_report


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


def test_callback_in_real_fit_logs_keys_and_speedup(tmp_path: Path) -> None:
    cfg = TelemetryConfig(log_every_n_steps=2, speedup_steps=3)
    callback = CompileTelemetry(cfg, run_dir=tmp_path, heartbeat_s=0.05)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=14,
        logger=CSVLogger(tmp_path, name="csv"),
        callbacks=[callback],
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(TinyModel())
    assert ti.current_stance() == "default"  # eager steps never leak force_eager

    figures = callback.figures()
    assert figures["compile/frames"] >= 1
    assert figures["compile/graphs"] >= 1
    assert figures["compile/time_s"] > 0
    assert figures["compile/recompiles"] == 0
    assert figures["compile/graph_breaks"] == 0
    assert figures["compile/guards_total"] > 0
    assert figures["compile/backward_s"] > 0  # the lazy backward compile was seen
    assert figures["perf/speedup_x"] > 0
    assert figures["perf/eager_step_ms"] > 0 and figures["perf/compiled_step_ms"] > 0
    assert figures["perf/tokens_per_s"] > figures["perf/samples_per_s"] > 0
    assert figures["perf/flops_source"] == "flop_counter"
    assert 0 < figures["perf/mfu"] < 1
    assert figures["memory/peak_gib"] > 0
    kinds = [e["kind"] for e in figures["compile/events"]]
    assert kinds.count("compile") >= 1 and kinds.count("backward") == 1
    modes = [p["mode"] for p in figures["perf/step_series"]]
    assert modes.count("eager") == 3 and modes.count("flops") == 1

    metrics = list(csv.DictReader((tmp_path / "csv" / "version_0" / "metrics.csv").open()))
    logged = {k for row in metrics for k, v in row.items() if v not in ("", None)}
    for key in (
        "compile/graphs", "compile/recompiles", "compile/graph_breaks", "compile/guards_total", "compile/time_s",
        "perf/step_ms", "perf/eager_step_ms", "perf/compiled_step_ms", "perf/speedup_x",
        "perf/samples_per_s", "perf/tokens_per_s", "perf/mfu", "memory/peak_gib",
    ):
        assert key in logged, key
    # break-even is logged when compiling pays off; aot_eager is not faster, so it may be "never" (inf)
    assert "perf/break_even_step" in logged or figures["perf/break_even_step"] == float("inf")
    assert "Sequential.forward" in (tmp_path / "compile_events.txt").read_text()

    write_report(tmp_path, figures)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["perf/speedup_x"] == pytest.approx(figures["perf/speedup_x"])
    assert (tmp_path / "step_times.png").stat().st_size > 1000
    assert "speedup [x]" in format_summary(figures)
