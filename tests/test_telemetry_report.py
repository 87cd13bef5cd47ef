"""Run report, sweep summary, speedup meter, throughput helpers and the sweep configs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from runner.telemetry.report import format_summary, write_report
from runner.telemetry.speedup import SpeedupMeter, break_even_step
from runner.telemetry.sweep import SweepSummary, summarize_sweep
from runner.telemetry.throughput import batch_counts, estimate_flops, trainable_parameters

CONF = Path(__file__).resolve().parents[1] / "conf"


def _figures(speedup: float, compile_s: float, recompiles: int, peak: float, spread: float = 0.05) -> dict:
    return {
        "compile/graphs": 2,
        "compile/recompiles": recompiles,
        "compile/graph_breaks": 1,
        "compile/time_s": compile_s,
        "perf/speedup_x": speedup,
        "perf/speedup_p25_x": speedup - spread,
        "perf/speedup_p75_x": speedup + spread,
        "perf/speedup_status": "measured",
        "perf/step_ms": 10.0,
        "perf/break_even_step": break_even_step(compile_s, 10.0, speedup),
        "memory/peak_gib": peak,
        "compile/recompile_reasons": [{"name": "f", "reason": "tensor 'x' size mismatch", "step": 3}],
        "compile/graph_break_reasons": [{"reason": "Call to `print()`", "user_frame": "m.py:4", "count": 2}],
        "compile/events": [{"kind": "compile", "step": 0}, {"kind": "recompile", "step": 3}],
        "perf/step_series": [{"step": i, "ms": 5.0 + i % 2, "mode": ("eager", "compiled")[i % 2]} for i in range(8)],
    }


def test_write_report_writes_valid_json_md_png(tmp_path: Path) -> None:
    figures = _figures(1.3, 40.0, 1, 0.5)
    write_report(tmp_path, figures)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["perf/speedup_x"] == 1.3 and report["perf/break_even_step"] == 13334  # 40 s / 3 ms saved per step
    assert report["compile/recompile_reasons"][0]["reason"] == "tensor 'x' size mismatch"
    md = (tmp_path / "report.md").read_text()
    assert "| speedup [x] | 1.3 (1.25 to 1.35) | median over the pairs" in md and "| break-even step | 13334 |" in md
    assert "m.py:4" in md
    assert (tmp_path / "step_times.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = format_summary(figures)
    assert "speedup [x]" in text and "1.3" in text and "tensor 'x' size mismatch" in text


def test_write_report_tolerates_partial_figures(tmp_path: Path) -> None:
    write_report(tmp_path, {"compile/time_s": 1.0})
    assert json.loads((tmp_path / "report.json").read_text()) == {"compile/time_s": 1.0}
    assert not (tmp_path / "step_times.png").exists()


def _job(sweep: Path, num: int, overrides: list[str], figures: dict) -> None:
    job = sweep / f"{num}-{','.join(overrides)}"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    write_report(job, figures)


def test_summarize_sweep_ranks_runs(tmp_path: Path) -> None:
    shared = ["+recipe=quickstart", "trainer.max_steps=80"]  # in every job: not part of the names
    _job(tmp_path, 0, ["compile=eager", "offload=none", *shared], _figures(1.0, 0.0, 0, 0.40))
    _job(tmp_path, 1, ["compile=step", "offload=none", *shared], _figures(1.4, 40.0, 2, 0.60))
    _job(tmp_path, 2, ["compile=step", "offload=bf16", *shared], _figures(1.2, 45.0, 0, 0.30))
    _job(tmp_path, 3, ["compile=eager", "offload=bf16", *shared], _figures(1.2, 5.0, 1, 0.35))
    (tmp_path / "4-broken").mkdir()
    (tmp_path / "4-broken" / "report.json").write_text("{truncated")

    summary = summarize_sweep(tmp_path)
    order = [r["job"] for r in summary["runs"]]
    # by speedup; the 1.2x tie broken by compile time (5 s before 45 s)
    assert order == [
        "compile=step,offload=none",
        "compile=eager,offload=bf16",
        "compile=step,offload=bf16",
        "compile=eager,offload=none",
    ]
    assert summary["best"] == "compile=step,offload=none"
    assert summary["rankings"]["compile_time"][0] == "compile=eager,offload=none"
    assert summary["rankings"]["recompiles"][:2] == ["compile=eager,offload=none", "compile=step,offload=bf16"]
    assert summary["rankings"]["memory"][0] == "compile=step,offload=bf16"
    assert summary["runs"][0]["ranks"] == {"speedup": 1, "compile_time": 3, "recompiles": 4, "memory": 4}
    assert json.loads((tmp_path / "summary.json").read_text())["best"] == summary["best"]
    assert "| 1 | `compile=step,offload=none` | 1.4 (1.35 to 1.45) |" in (tmp_path / "summary.md").read_text()
    assert "Every run: `+recipe=quickstart trainer.max_steps=80`" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "summary.png").stat().st_size > 1000


def test_a_sweep_that_trains_differently_is_ranked_by_the_objectives_validation_figures(tmp_path: Path) -> None:
    """Jobs that differ beyond the compile stack (a beta) rank by what they minimised: a preference objective by
    TRL's validation accuracy, then loss; jobs that differ in the stack alone still rank by speedup, the objective's
    figures shown (issue 85)."""
    def dpo(speedup: float, accuracy: float, loss: float) -> dict:
        return {**_figures(speedup, 3.0, 0, 0.2), "objective/loss": "dpo", "val/loss": loss,
                "val/rewards/accuracies": accuracy}

    betas, stacks = tmp_path / "betas", tmp_path / "stacks"
    _job(betas, 0, ["objective.beta=0.1"], dpo(1.5, 0.50, 0.70))
    _job(betas, 1, ["objective.beta=0.5"], dpo(1.1, 0.75, 0.90))
    _job(betas, 2, ["objective.beta=0.9"], dpo(1.3, 0.75, 0.60))
    summary = summarize_sweep(betas)
    assert [r["job"] for r in summary["runs"]] == ["objective.beta=0.9", "objective.beta=0.5", "objective.beta=0.1"]
    assert [c[1] for c in summary["columns"][:3]] == ["val rewards/accuracies", "val loss", "speedup [x]"]
    md = (betas / "summary.md").read_text()
    assert "Ranked by val rewards/accuracies, then val loss, speedup," in md and "val bits/byte" not in md
    assert "- lowest val loss: `objective.beta=0.9`, 0.6" in md
    _job(stacks, 0, ["compile=eager"], dpo(1.0, 0.75, 0.60))
    _job(stacks, 1, ["compile=step", "dynamic=static"], dpo(1.4, 0.50, 0.70))
    summary = summarize_sweep(stacks)
    assert summary["best"] == "compile=step,dynamic=static" and summary["columns"][0][1] == "speedup [x]"
    assert [c[1] for c in summary["columns"][-2:]] == ["val rewards/accuracies", "val loss"]
    lm = tmp_path / "lm"
    _job(lm, 0, ["optimizer.lr=0.1"], {**_figures(1.5, 3.0, 0, 0.2), "val/bpb": 2.0})
    _job(lm, 1, ["optimizer.lr=0.01"], {**_figures(1.1, 3.0, 0, 0.2), "val/bpb": 1.5})
    summary = summarize_sweep(lm)
    assert summary["best"] == "optimizer.lr=0.01" and summary["columns"][0] == ["val/bpb", "val bits/byte"]


def test_sweep_summary_hydra_callback(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    _job(tmp_path, 0, ["compile=step"], _figures(1.1, 3.0, 0, 0.2))
    SweepSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert (tmp_path / "summary.md").exists()


@pytest.mark.parametrize("sweep", sorted(p.stem for p in (CONF / "sweep").glob("*.yaml")))
def test_sweep_configs_compose(sweep: str) -> None:
    from hydra import compose, initialize_config_dir

    from runner.config.composing.store import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"+sweep={sweep}"], return_hydra_config=True)
    assert cfg.hydra.callbacks.sweep_summary._target_ == "runner.telemetry.sweep.SweepSummary"
    params = cfg.hydra.sweeper.params
    assert params, "a sweep without parameters"
    for group, options in params.items():  # every swept option is a real file of its group
        for option in str(options).split(","):
            assert (CONF / str(group) / f"{option}.yaml").exists(), (group, option)


def test_speedup_meter_schedule_and_figures() -> None:
    meter = SpeedupMeter(pairs=2, steady_steps=2)
    ms = {"warmup": 1000.0, "flops": 50.0, "eager": 20.0, "compiled": 10.0}
    modes = []
    for step in range(12):
        mode = meter.next_mode()
        modes.append(mode)
        meter.record(step, mode, ms[mode], compiled_something=step in (0, 5))
    # step 5 compiled (a recompile): its slot is repeated, its time discarded
    assert modes[:9] == ["warmup", "warmup", "warmup", "flops", "eager", "compiled", "compiled", "compiled", "eager"]
    figures = meter.figures(compile_time_s=1.0)
    assert figures["perf/speedup_x"] == 2.0 == figures["perf/speedup_p25_x"] == figures["perf/speedup_p75_x"]
    assert figures["perf/eager_step_ms"] == 20.0 and figures["perf/compiled_step_ms"] == 10.0
    assert figures["perf/break_even_step"] == 100  # 1 s / 10 ms saved per step
    assert figures["perf/speedup_pairs"] == 2 and figures["perf/speedup_steps"] == "4-8"
    assert figures["perf/speedup_status"] == "measured"
    # Compiled time x (speedup - 1) saved per step; no speedup above 1: never.
    assert break_even_step(1.0, 10.0, 1.1) == 1000 and break_even_step(1.0, 10.0, 0.95) == math.inf
    assert break_even_step(1.0, 10.0, 1.0) == math.inf


def test_step_series_of_a_long_run_stays_bounded_and_keeps_every_rare_point() -> None:
    """100 000 steps keep at most SERIES_POINTS compiled points, evenly spaced (multiples of the
    reported stride); every warm-up, compile, FLOP-counting and eager point stays, and the live figures
    still use every recent step."""
    from runner.telemetry.speedup import SERIES_POINTS

    meter = SpeedupMeter(pairs=3)
    recompile = {50_000, 80_001}
    for step in range(100_000):
        mode = meter.next_mode()
        meter.record(step, mode, 10.0 + step % 3, step == 0 or step in recompile, samples=4)
    figures = meter.figures(1.0)
    points, stride = figures["perf/step_series"], figures["perf/step_series_stride"]
    compiled = [p["step"] for p in points if p["mode"] == "compiled"]
    assert SERIES_POINTS // 2 <= len(compiled) <= SERIES_POINTS and stride == 32
    assert all(s % stride == 0 for s in compiled) and compiled == sorted(compiled) and compiled[-1] >= 99_968
    rare = [(p["step"], p["mode"]) for p in points if p["mode"] != "compiled"]
    assert [s for s, m in rare if m == "compile"] == [0, 50_000, 80_001]
    assert [m for _, m in rare].count("eager") == 3 and [m for _, m in rare].count("flops") == 1
    assert meter.ran_compiled and figures["perf/step_ms"] == 11.0 and figures["perf/speedup_x"] > 0
    short = SpeedupMeter(pairs=0)
    for step in range(10):
        short.record(step, short.next_mode(), 1.0, False)
    assert len(short.figures(1.0)["perf/step_series"]) == 10 and short.figures(1.0)["perf/step_series_stride"] == 1


def test_live_figures_use_the_recent_steps_and_leave_the_series_out() -> None:
    """Throughput and step time are over the last RECENT compiled steps (a slower start does not
    count), and the figures logged every N steps do not copy the whole series (a live figure costs the
    same at step 100 000 as at step 10)."""
    from runner.telemetry.speedup import RECENT

    meter = SpeedupMeter(pairs=0)
    for step in range(2000):
        mode = meter.next_mode()
        meter.record(step, mode, 100.0 if step < 1000 else 10.0, step == 0, samples=4, tokens=40)
    assert meter.rate("tokens") == 40 / 0.010 and meter.rate("samples") == 4 / 0.010
    live = meter.figures(1.0, series=False)
    assert live["perf/step_ms"] == 10.0 and "perf/step_series" not in live
    assert len(meter.figures(1.0)["perf/step_series"]) == 2000
    # Nothing compiled: the steady warm-up steps, without the first (which may compile).
    eager = SpeedupMeter(pairs=0)
    for step in range(RECENT + 5):
        eager.record(step, eager.next_mode(), 1000.0 if step == 0 else 20.0, False, samples=2)
    assert eager.rate("samples") == 2 / 0.020


def test_speedup_disabled_runs_no_eager_steps() -> None:
    meter = SpeedupMeter(pairs=0)
    for step in range(6):
        assert meter.next_mode() in ("warmup", "compiled")
        meter.record(step, meter.next_mode(), 5.0, False)
    assert "perf/speedup_x" not in meter.figures(1.0)


def test_speedup_is_the_median_of_pair_ratios() -> None:
    """A load burst that slows one pair's two steps alike cancels in that pair's ratio."""
    from runner.telemetry.speedup import pair_ratios

    window = [("eager", 20.0, 1), ("compiled", 10.0, 1), ("compiled", 30.0, 1), ("eager", 60.0, 1),
              ("eager", 22.0, 1), ("compiled", 10.0, 1)]
    assert pair_ratios(window) == [2.0, 2.0, 2.2]
    # Variable-length batches: a pair compares time per token (eager 40 ms for 200 tokens, compiled 10 ms
    # for 100 tokens: 0.2 vs 0.1 ms per token).
    assert pair_ratios([("eager", 40.0, 200), ("compiled", 10.0, 100)]) == [2.0]
    meter = SpeedupMeter(pairs=3, count_flops=False)
    meter.compiled_any, meter._measuring, meter.schedule = True, True, []
    meter.window = window
    assert meter.figures(0.0)["perf/speedup_x"] == 2.0  # a ratio of medians would say 22/10 = 2.2


def test_nothing_compiled_runs_no_eager_steps_and_reports_no_speedup() -> None:
    """compile=eager: timing eager against itself would print a meaningless "speedup"."""
    meter = SpeedupMeter(pairs=3)
    modes = []
    for step in range(10):
        modes.append(meter.next_mode())
        meter.record(step, modes[-1], 5.0, compiled_something=False)
    assert set(modes) == {"warmup", "compiled"} and not meter.compiled_any
    figures = meter.figures(0.0)
    assert "perf/speedup_x" not in figures and figures["perf/step_ms"] == 5.0


def test_throughput_helpers() -> None:
    tokens = batch_counts((torch.zeros(4, 16, dtype=torch.long), torch.zeros(4, 16, dtype=torch.long)))
    assert (tokens.samples, tokens.tokens, int(tokens.examples), int(tokens.loss_tokens)) == (4, 64, 4, 64)
    features = batch_counts({"x": torch.zeros(8, 3), "y": torch.zeros(8)})
    assert (features.samples, features.tokens, features.examples, features.loss_tokens) == (8, None, 8, None)
    linear = torch.nn.Linear(10, 10)
    assert estimate_flops(trainable_parameters(linear), 4, None) == 6 * 110 * 4
    linear.bias.requires_grad_(False)
    assert trainable_parameters(linear) == 100


def test_untimed_steps_feed_no_step_time_figure() -> None:
    """On a GPU most steps are not waited for: their host time (the launches) is kept in the series
    but no step time, throughput or speedup figure uses it, and the plot leaves it out."""
    meter = SpeedupMeter(pairs=1, steady_steps=1, count_flops=False)
    meter.record(0, meter.next_mode(), 900.0, compiled_something=True, samples=4)  # the compile
    meter.record(1, meter.next_mode(), 1.0, compiled_something=False, samples=4, timed=False)
    assert meter.wants_time(meter.next_mode())  # the pair steps are timed
    meter.record(2, meter.next_mode(), 1.0, compiled_something=False, samples=4, timed=False)
    assert not meter.window and meter.next_mode() == "eager"  # an untimed pair step is run again
    for step, mode in ((3, "eager"), (4, "compiled")):
        assert meter.next_mode() == mode
        meter.record(step, mode, 20.0 if mode == "eager" else 10.0, compiled_something=False, samples=4)
    assert not meter.wants_time(meter.next_mode())  # after the window only sampled steps are timed
    meter.record(5, meter.next_mode(), 0.5, compiled_something=False, samples=4, timed=False)
    meter.record(6, meter.next_mode(), 12.0, compiled_something=False, samples=4)
    figures = meter.figures(compile_time_s=0.9)
    assert figures["perf/speedup_x"] == 2.0
    assert figures["perf/step_ms"] == 11.0  # median of the timed compiled steps 10 and 12
    assert meter.rate("samples") == pytest.approx(8 / 0.022)
    assert [p["timed"] for p in figures["perf/step_series"]] == [True, False, False, True, True, False, True]


def test_a_step_that_compiled_is_left_out_under_no_cuda_graph_label() -> None:
    """On the CPU no step records CUDA graphs: the first step's compile time is the left-out steps' median, shown
    under them, and no CUDA-graph row (there was one: 'recording CUDA graphs 0', the median right below it)."""
    meter = SpeedupMeter(pairs=0)
    meter.record(0, "warmup", 227_000.0, compiled_something=True)
    for step in range(1, 4):
        meter.record(step, "warmup", 50.0, compiled_something=False)
    figures = meter.figures(compile_time_s=227.0)
    assert figures["perf/left_out_steps"] == 1 and figures["perf/left_out_step_ms"] == 227_000.0
    assert "perf/recording_steps" not in figures
    rows = [line for line in format_summary(figures).splitlines() if "left out" in line or "median [ms]" in line]
    assert [row.split("│")[1].strip() for row in rows] == ["steps left out", "their median [ms]"], rows
    assert "CUDA graphs" not in format_summary(figures)
    meter.record(4, "compiled", 60.0, compiled_something=True, recording_only=True)  # a CUDA-graph recording
    assert meter.figures(compile_time_s=227.0)["perf/recording_steps"] == 1
