"""Throughput that compares across packing and padding (issue 75): each batch's examples (a packed row holds
several, a padded row one) and its targets in the loss, counted without waiting for the device; the rates of the
steps ``perf/step_ms`` is the median of, so that a rate and the step time agree; and in a run, every rate in the
summary, ``report.json`` and the loggers, the packed run's examples/s above its rows/s, and the padded run's
recompile advised with packing."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from runner.data.instruct import InstructDataModule
from runner.data.preference import PreferenceDataModule
from runner.data.preference.batch import PairPacks
from runner.data.sequences.padding import IGNORE_INDEX
from runner.telemetry.speedup import SpeedupMeter
from runner.telemetry.throughput import batch_counts
from tests.after_runs import FAST, train

ROWS = [{"prompt": f"question {i}?", "response": "a" * (1 + i * 7 % 41)} for i in range(120)]


def _data(tmp_path: Path, packing: bool) -> InstructDataModule:
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    data = InstructDataModule(str(path), seq_len=128, batch_size=4, packing=packing, val_fraction=0.1)
    data.setup()
    return data


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded"])
def test_a_batch_counts_its_examples_and_its_targets_in_the_loss(tmp_path: Path, packing: bool) -> None:
    data = _data(tmp_path, packing)
    examples = loss = rows = 0
    for batch in data.train_dataloader():
        counts = batch_counts(batch)
        assert isinstance(counts.examples, torch.Tensor) and counts.examples.dim() == 0  # no .item() per step
        examples, loss, rows = examples + int(counts.examples), loss + int(counts.loss_tokens), rows + counts.samples
        assert counts.tokens == batch[1].numel()  # positions, padding included
        assert int(counts.loss_tokens) == int((batch[1] != IGNORE_INDEX).sum())
    # drop_last leaves out the last partial batch: every example of the batches that ran, once.
    seen = rows if not packing else sum(len(data._train.rows[r]) for r in range(len(data._train)))  # type: ignore[union-attr]
    if packing:
        assert examples > rows and examples <= seen
        assert abs(examples / rows - data.figures()["data/examples_per_pack"]) < 1.0
    else:
        assert examples == rows == len(data._train) // 4 * 4  # type: ignore[arg-type]


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded"])
def test_a_preference_batch_counts_its_pairs(packing: bool) -> None:
    """A pair is the example, padded (two rows) or packed (several pairs a row), and empty pair slots are none."""
    shipped = Path(__file__).resolve().parents[1] / "examples" / "data" / "preference.jsonl"
    data = PreferenceDataModule(str(shipped), seq_len=128, batch_size=4, packing=packing, max_examples=40)
    data.setup()
    pairs = loss = 0
    for batch in data.val_dataloader():  # its last batch is filled with empty pair slots
        counts = batch_counts(batch)
        pairs, loss = pairs + int(counts.examples), loss + int(counts.loss_tokens)
        assert int(counts.loss_tokens) == int((batch[1] != IGNORE_INDEX).sum())
    val = data.datasets["val"]
    assert pairs == (len(val.fitted) if isinstance(val, PairPacks) else len(val)) > 0


def test_a_rate_is_work_per_step_over_the_median_step_time() -> None:
    """The padded run of issue 75: 8 samples a step at a median of 169 ms is ~47 samples/s, whatever a few steps
    held up by the machine took (a total over a total time said 18)."""
    meter = SpeedupMeter(pairs=0)
    meter.record(0, meter.next_mode(), 900.0, compiled_something=True)
    for step, ms in enumerate([169.0] * 40 + [1500.0] * 9, start=1):
        meter.record(step, meter.next_mode(), ms, compiled_something=False, samples=8, tokens=8 * 120,
                     examples=torch.tensor(8), loss_tokens=torch.tensor(300))
    figures = meter.figures(compile_time_s=1.0)
    assert figures["perf/step_ms"] == 169.0
    assert meter.rate("samples") == pytest.approx(8 / 0.169) and meter.rate("examples") == pytest.approx(8 / 0.169)
    assert meter.rate("loss_tokens") == pytest.approx(300 / 0.169)
    assert meter.rate("tokens") == pytest.approx(960 / 0.169)


def _rates(run_dir: Path) -> dict[str, Any]:
    report = json.loads((run_dir / "report.json").read_text())
    return {k: report.get(k) for k in ("perf/samples_per_s", "perf/tokens_per_s", "perf/examples_per_s",
                                       "perf/loss_tokens_per_s", "perf/step_ms")}


def test_packed_and_padded_runs_report_rates_that_compare(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    base = ["model=gpt_tiny", "data=instruct", f"data.path={path}", "data.seq_len=128", "data.batch_size=4",
            "compile.backend=eager", *FAST, "trainer.max_steps=6"]
    packed, padded = (_rates(train(tmp_path / name, [*base, f"data.packing={name == 'packed'}"]).run_dir)
                      for name in ("packed", "padded"))
    # The padded run recompiled for a new length: its advice is the data's (packing, a shape policy), not drop_last.
    recompiles = json.loads((tmp_path / "padded" / "report.json").read_text())["compile/recompile_reasons"]
    assert recompiles and all("data.packing=true" in r["fix"] and "drop_last" not in r["fix"] for r in recompiles)
    for rates in (packed, padded):
        assert all(isinstance(v, float) and v > 0 for v in rates.values()), rates
        assert rates["perf/samples_per_s"] == pytest.approx(4 / (rates["perf/step_ms"] / 1000))  # agrees with the step
        assert rates["perf/loss_tokens_per_s"] < rates["perf/tokens_per_s"]  # no prompt, no padding
    assert packed["perf/examples_per_s"] / packed["perf/samples_per_s"] > 1.5  # several examples a packed row
    assert padded["perf/examples_per_s"] == pytest.approx(padded["perf/samples_per_s"])  # one a padded row
    metrics = list(csv.DictReader((tmp_path / "packed" / "csv" / "metrics.csv").open()))
    logged = {k for row in metrics for k, v in row.items() if v not in ("", None)}
    assert {"perf/examples_per_s", "perf/loss_tokens_per_s"} <= logged  # every logger gets them
    summary = (tmp_path / "packed" / "report.md").read_text()
    assert "examples/s" in summary and "tokens in the loss/s" in summary and "positions/s (padding incl.)" in summary
