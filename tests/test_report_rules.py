"""The rules that keep the run report and the sweep summary from contradicting themselves, and the
pictures that show them: break-even vs speedup, the result sentence, the quartiles, the legends."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from runner.telemetry.definitions import SECTIONS
from runner.telemetry.plots import step_times_figure, sweep_figure
from runner.telemetry.report import format_summary, summary_rows, write_report
from runner.telemetry.speedup import SpeedupMeter
from runner.telemetry.sweep import summarize_sweep
from runner.telemetry.verdict import break_even_text, contradictions, speedup_verdict


def _measured(speedup: float, p25: float, p75: float, eager: float, compiled: float, compile_s: float = 40.0,
              break_even: float | None = None, pairs: int = 20) -> dict[str, Any]:
    return {"perf/speedup_x": speedup, "perf/speedup_p25_x": p25, "perf/speedup_p75_x": p75,
            "perf/eager_step_ms": eager, "perf/compiled_step_ms": compiled, "compile/time_s": compile_s,
            "perf/break_even_step": break_even if break_even is not None else math.inf,
            "perf/speedup_status": "measured", "perf/speedup_pairs": pairs, "perf/speedup_steps": "5-44"}


# -- the quickstart's contradiction, as it was printed --------------------------------------------------
QUICKSTART = _measured(0.8134, 0.79, 0.85, 1340.0, 1288.0, compile_s=21.2, break_even=408)


def test_a_slower_compiled_step_never_breaks_even_in_any_output(tmp_path: Path) -> None:
    """speedup 0.8134 beside break-even 408 (the medians 1340 vs 1288 ms said faster): every output says never."""
    assert contradictions(QUICKSTART) == ["break-even 408 beside a speedup of 0.8134 (not above 1)"]
    assert break_even_text(QUICKSTART) == "never"
    assert dict(summary_rows(QUICKSTART))["break-even step"] == "never"
    write_report(tmp_path, QUICKSTART)
    assert json.loads((tmp_path / "report.json").read_text())["perf/break_even_step"] == "never"
    assert "| break-even step | never |" in (tmp_path / "report.md").read_text()
    # The medians point the other way than the pairs: the result says so instead of picking a side.
    kind, sentence = speedup_verdict(QUICKSTART)
    assert kind == "noise" and "1340 vs 1288 ms" in sentence and "point opposite ways" in sentence


def test_the_meter_breaks_even_exactly_when_the_speedup_is_above_one() -> None:
    """Real meter records, pairs whose medians favour compiled while most pairs favour eager: the
    break-even comes from the speedup, never from the medians."""
    for eager_ms, compiled_ms in (([30, 10, 11, 10, 10], [12, 12, 12, 12, 12]), ([20, 20, 20], [10, 10, 10])):
        meter = SpeedupMeter(pairs=len(eager_ms), steady_steps=1, count_flops=False)
        step, times = 0, {"eager": list(eager_ms), "compiled": list(compiled_ms)}
        meter.record(step, meter.next_mode(), 500.0, compiled_something=True)
        while not meter.done:
            step += 1
            mode = meter.next_mode()
            meter.record(step, mode, float(times[mode].pop(0)) if mode in times else 5.0, compiled_something=False)
        figures = {**meter.figures(compile_time_s=2.0), "compile/time_s": 2.0}
        assert contradictions(figures) == []
        assert math.isfinite(figures["perf/break_even_step"]) == (figures["perf/speedup_x"] > 1)
        assert figures["perf/speedup_p25_x"] <= figures["perf/speedup_x"] <= figures["perf/speedup_p75_x"]


def test_quartiles_stay_inside_the_measured_ratios() -> None:
    """Two pairs (ratios 0.37 and 4.1) once gave a 25th percentile of -0.57: quartiles of a speedup are
    inside the ratios measured."""
    meter = SpeedupMeter(pairs=2, steady_steps=1, count_flops=False)
    meter.record(0, meter.next_mode(), 900.0, compiled_something=True)
    meter.record(1, meter.next_mode(), 50.0, compiled_something=False)  # the warm-up's quiet step
    for step, ms in enumerate((41.0, 10.0, 6.9, 2.56), start=2):
        meter.record(step, meter.next_mode(), ms, compiled_something=False)
    figures = meter.figures(1.0)
    ratios = (41.0 / 10.0, 2.56 / 6.9)
    assert min(ratios) <= figures["perf/speedup_p25_x"] <= figures["perf/speedup_p75_x"] <= max(ratios)


@pytest.mark.parametrize(("figures", "kind", "words"), [
    (_measured(1.39, 1.30, 1.45, 34.2, 24.6, compile_s=32.0, break_even=3336), "faster",
     ["28% less time", "pay for themselves after 3336 steps"]),
    (_measured(0.81, 0.78, 0.84, 1288.0, 1340.0), "slower", ["23% more time", "break-even: never"]),
    (_measured(0.99, 0.95, 1.03, 100.0, 101.0), "noise", ["no measurable difference", "includes 1"]),
    (_measured(1.5, 1.4, 1.6, 15.0, 10.0, break_even=8000, pairs=5), "faster", ["only 5 pairs: a rough figure"]),
    (_measured(25.5, 23.5, 27.6, 104.4, 4.0, compile_s=0.353, break_even=4, pairs=2), "noise",
     ["too few pairs to tell", "25.50x from only 2 pairs", "raise telemetry.speedup_steps"]),
    ({"perf/speedup_status": "nothing compiled", "compile/scope": "none"}, "none", ["nothing was compiled"]),
    ({"perf/speedup_status": "disabled"}, "none", ["telemetry.speedup_steps=0"]),
    ({"perf/speedup_status": "1 of 20 pairs measured"}, "none", ["1 of 20 pairs", "trainer.max_steps"]),
    ({**_measured(1.39, 1.30, 1.45, 34.2, 24.6, break_even=3336), "perf/speedup_status": "measured before the resume"},
     "faster", ["before the resume", "compiling pays for itself after 3336 steps"]),
])
def test_the_result_sentence(figures: dict[str, Any], kind: str, words: list[str]) -> None:
    got_kind, sentence = speedup_verdict(figures)
    assert got_kind == kind, sentence
    for word in words:
        assert word in sentence
    assert contradictions(figures) == []


def test_consistency_rules_catch_each_contradiction() -> None:
    assert contradictions(_measured(1.5, 1.6, 1.7, 15.0, 10.0, break_even=200)) == [
        "speedup 1.5 outside its quartiles 1.6-1.7",
        "break-even 200, but compile time / time saved per step gives 8000"]
    assert contradictions(_measured(1.2, 1.1, 1.3, 12.0, 10.0, break_even=math.inf)) == [
        "break-even inf beside a speedup of 1.2"]
    assert contradictions({"perf/break_even_step": 10}) == ["speedup figures without a speedup"]


def test_console_table_shows_the_result_and_what_the_timing_rows_measure() -> None:
    figures = {**QUICKSTART, "perf/break_even_step": math.inf, "perf/step_ms": 2465.0, "run/steps": 300}
    text = format_summary(figures, title="runner: quickstart")
    rows = dict(summary_rows(figures))
    assert rows["speedup [x]"] == "0.8134 (0.79 to 0.85)" and rows["  pairs at steps"] == "5-44 (20 pairs)"
    assert rows["step, last 50 [ms]"] == "2465" and rows["break-even step"] == "never"
    assert "result: no measurable difference" in text
    for label in ("speedup [x]:", "break-even step:", "step, last 50 [ms]:"):
        assert label in text
    assert "eager step [ms]:" not in text  # the console defines the timing rows; report.md defines all


def test_every_summary_figure_is_defined_in_the_docs() -> None:
    """docs/report.md defines every figure of the summary, by its label and its report.json key."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "report.md").read_text()
    for _, section in SECTIONS:
        for figure in section:
            assert f"`{figure.key}`" in docs and figure.label.strip() in docs, figure.key


def test_a_resumed_run_without_its_own_pairs_says_where_its_speedup_comes_from() -> None:
    carried = {**_measured(1.39, 1.3, 1.45, 34.2, 24.6, break_even=3336),
               "perf/speedup_status": "measured before the resume"}
    assert dict(summary_rows(carried))["  pairs at steps"] == "5-44 (20 pairs), before the resume"
    assert dict(summary_rows({"perf/speedup_status": "nothing compiled"}))["speedup [x]"] == "nothing compiled"


# -- pictures --------------------------------------------------------------------------------------
def _series(n: int = 60, compile_ms: float = 23_000.0) -> list[dict[str, Any]]:
    modes = ["compile", "warmup", "warmup", "flops"] + ["eager", "compiled", "compiled", "eager"] * 5
    modes += ["compiled"] * (n - len(modes))
    return [{"step": i, "ms": compile_ms if m == "compile" else (30.0 if m == "eager" else 20.0 + i % 3),
             "mode": m, "timed": True} for i, m in enumerate(modes)]


def test_step_times_clips_the_compile_step_and_writes_its_time_on_the_mark() -> None:
    figures = {**_measured(1.45, 1.4, 1.5, 30.0, 20.5, compile_s=23.0, break_even=2494), "perf/step_ms": 21.0,
               "perf/step_series": _series(), "perf/speedup_steps": "4-23",
               "compile/events": [{"kind": "compile", "step": 0, "duration_s": 21.7},
                                  {"kind": "backward", "step": 0, "duration_s": 1.3}]}
    fig = step_times_figure(figures)
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert "recompile" not in labels and "compile" in labels  # the legend names only what happened
    assert "eager median of the pairs: 30 ms" in labels and "compiled median of the pairs: 20.5 ms" in labels
    assert ax.get_ylim()[1] < 100  # the steady steps fill the axis; the 23 s step is not plotted to scale
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["compile 23 s (step 23 s)"]  # forward + backward compile, and the step's own time
    assert "31% less time" in ax.get_title(loc="left")


def test_drawing_the_pictures_leaves_the_users_matplotlib_as_it_was(tmp_path: Path) -> None:
    """A fit in a notebook draws step_times.png: the notebook keeps its backend and its open figures."""
    import matplotlib
    import matplotlib.pyplot as plt

    from runner.telemetry.plots import plot_step_times, plot_sweep

    before = matplotlib.get_backend()
    plt.switch_backend("svg")  # a backend of the user's (a notebook's inline one, say)
    users = plt.figure()
    try:
        assert plot_step_times({"perf/step_series": _series()}, tmp_path / "step_times.png")
        plot_sweep([{"job": "compile=step", "figures": {**_measured(1.4, 1.3, 1.5, 30.0, 21.0)}}],
                   tmp_path / "summary.png", (("perf/speedup_x", "speedup [x]"),))
        assert matplotlib.get_backend() == "svg" and plt.get_fignums() == [users.number]
        assert (tmp_path / "step_times.png").read_bytes().startswith(b"\x89PNG")
        assert (tmp_path / "summary.png").read_bytes().startswith(b"\x89PNG")
    finally:
        plt.close(users)
        plt.switch_backend(before)


def test_step_times_marks_each_recompile_at_its_step() -> None:
    figures = {"perf/step_series": _series(), "compile/events": [
        {"kind": "compile", "step": 0, "duration_s": 20.0}, {"kind": "recompile", "step": 40, "duration_s": 2.5}]}
    ax = step_times_figure(figures).axes[0]
    assert {"compile", "recompile"} <= set(ax.get_legend_handles_labels()[1])
    assert "recompile 2.5 s" in [t.get_text() for t in ax.texts]


def test_step_times_says_how_the_loss_was_computed_and_the_peak_memory() -> None:
    chunked = {"perf/step_series": _series(), "loss/chunked": True, "loss/chunks": 8, "loss/chunk_rows": 512,
               "loss/logits_gib": 1.957, "memory/peak_gib": 1.35}
    assert step_times_figure(chunked).axes[0].get_xlabel() == (
        "step\nloss: 8 chunks of 512 positions, never the whole logits (1.96 GiB a step); peak memory 1.35 GiB")
    one = {**chunked, "loss/chunks": 1, "loss/chunk_rows": 4096}
    assert step_times_figure(one).axes[0].get_xlabel().startswith("step\nloss: 1 chunk of 4096 positions, never")
    whole = {"perf/step_series": _series(), "loss/chunked": False, "memory/peak_gib": 2.99}
    assert step_times_figure(whole).axes[0].get_xlabel() == "step\nloss: from the whole logits; peak memory 2.99 GiB"


def test_sweep_picture_draws_every_run_with_its_spread(tmp_path: Path) -> None:
    eager = {"perf/speedup_status": "nothing compiled", "compile/scope": "none", "compile/time_s": 0.0,
             "perf/step_ms": 30.0}
    step = {**_measured(1.4, 1.3, 1.5, 30.0, 21.0), "perf/step_ms": 21.0}
    runs = [{"job": "compile=step", "figures": step}, {"job": "compile=eager", "figures": eager}]
    fig = sweep_figure(runs, (("perf/speedup_x", "speedup [x]"), ("compile/time_s", "compile [s]")))
    speed, compile_ax = fig.axes
    assert "nothing compiled: the eager baseline" in [t.get_text() for t in speed.texts]
    assert len(speed.containers) >= 2  # the bar and its 25th-75th percentile whisker
    assert " 0 (nothing compiled)" in [t.get_text() for t in compile_ax.texts]


def test_sweep_says_when_the_best_run_leads_by_less_than_the_noise(tmp_path: Path) -> None:
    for i, (job, figures) in enumerate((
            ("compile=step", _measured(0.99, 0.95, 1.04, 100.0, 101.0)),
            ("compile=blocks", _measured(0.97, 0.93, 1.0, 100.0, 103.0)),
            ("compile=eager", {"perf/speedup_status": "nothing compiled", "compile/scope": "none"}))):
        (tmp_path / f"{i}" / ".hydra").mkdir(parents=True)
        (tmp_path / f"{i}" / ".hydra" / "overrides.yaml").write_text(f"- {job}\n")
        write_report(tmp_path / f"{i}", figures)
    summary = summarize_sweep(tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert summary["best"] == "compile=step"
    assert "No run's compiled steps were measurably faster than eager" in md
    assert "`compile=step` leads by less than the noise" in md and "`compile=blocks`" in md
    assert "| never |" in md and "nothing compiled" in md and "best speedup" not in md
    assert "**speedup [x]**: median over the pairs" in md  # the columns are defined under the table
