"""``benchmarks/gpu.py``: every workload runs with ``--quick`` on the CPU; the queue spends a budget in order of
need (fake costs and a fake clock); a run's rows fold into ``benchmarks/results/gpu.json`` and docs/gpu.md's
tables are what it writes; ``scripts/gpu_session.sh --dry-run`` gets through in a GPU-like venv (slow).

Structure only: timings are never asserted (the machine is shared and they drift).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)
from gpu_workloads.common import NOT_STARTED, Context, RunFile, Workload, run_jobs  # noqa: E402
from gpu_workloads.docs import marked, render, table  # noqa: E402
from gpu_workloads.hf import break_even  # noqa: E402
from gpu_workloads.results import ROW_META, contestant_order, load, need_order, plan, unit_cost  # noqa: E402
from gpu_workloads.specs import contestant_runner  # noqa: E402

sys.path.remove(str(ROOT / "benchmarks"))

# Per workload, its eager or compiled peer and contestants of runner's (each workload's code paths: the dry run
# races every contestant). One child process per workload, two for cold_start (cold, then warm).
QUICK_CONTESTANTS = ["lightning", "lightning_compile_fused", "runner_step", "runner_graphed", "lightning_compile",
                     "runner_bucket", "runner_defaults", "runner_fp8", "runner_checkpoint_budget", "runner",
                     "runner_in_run", "runner_packed", "runner_lora", "runner_dpo_packed", "runner_chunked"]
EXPECTED = {"gpt_small": ["lightning", "lightning_compile_fused", "runner_step", "runner_graphed"],
            # eager Lightning first, then never measured in the workload's order
            "hf_varlen": ["lightning", "lightning_compile", "runner_defaults", "runner_bucket"],
            "memory": ["lightning_compile", "runner_checkpoint_budget", "runner_fp8"],
            "cold_start": ["runner", "lightning_compile", "runner_in_run"],
            "packing": ["lightning", "runner_packed", "lightning_compile", "runner_bucket"],
            "lora": ["lightning_peft", "runner_lora"],  # the user's own baseline first: HF peft, eager
            "dpo": ["runner_dpo_packed"],  # TRL is not in the test environment: its peers race on the GPU machine
            "vocab": ["lightning", "lightning_compile", "runner_chunked"]}

# The GPT peers and eager Lightning (hf_varlen) run anyway; every contestant added for issue 69 is here.
DRY_CONTESTANTS = ["runner_step", "runner_cudagraphs_disabled", "runner_graphed", "runner_defaults", "runner_best",
                   "runner_bucket", "runner_fp8", "runner", "runner_in_run", "runner_packed",
                   "runner_lora", "runner_dpo_packed", "runner_chunked"]
DRY_EXPECTED = {"gpt_small": ["lightning", "lightning_compile_fused", "runner_step", "runner_cudagraphs_disabled",
                              "runner_graphed", "runner_best"],
                "hf_varlen": ["lightning", "runner_defaults", "runner_best", "runner_bucket"],
                "memory": ["runner_fp8"], "cold_start": ["runner", "runner_in_run"],
                "packing": ["lightning", "runner_packed", "runner_bucket"],
                "lora": ["lightning_peft", "runner_lora"], "dpo": ["runner_dpo_packed"],
                "vocab": ["lightning", "lightning_compile", "runner_chunked"]}


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict[str, Any]]]:
    """``benchmarks/gpu.py --quick`` once over every workload: its printed tables and its run files."""
    out = tmp_path_factory.mktemp("gpu")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--quick", "--backend", "eager",
                           "--out-dir", str(out), "--contestants", *QUICK_CONTESTANTS],
                          capture_output=True, text=True, cwd=out, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    return proc.stdout, {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


@pytest.mark.slow
def test_quick_runs_every_workload_and_writes_its_rows(quick: tuple[str, dict[str, dict[str, Any]]]) -> None:
    text, runs = quick
    assert set(runs) == set(EXPECTED)  # gpt_124m is gpt_small's tiny GPT under --quick: left out
    for name, run in runs.items():
        assert [r["contestant"] for r in run["rows"]] == EXPECTED[name], name
        # complete: every contestant of the workload raced (only cold_start's two here)
        assert run["complete"] is (len(EXPECTED[name]) == len(gpu.WORKLOADS[name].contestants))
        assert run["units"] == (1 if name == "gpt_small" else len(EXPECTED[name]))
        assert run["quick"] is True and run["device"].startswith("cpu") and run["wall_s"] > 0
        assert all("error" not in r for r in run["rows"]), run["rows"]
        assert f"`{name}`: " in text and f"| `{EXPECTED[name][-1]}` |" in text  # each table printed as it ends


@pytest.mark.slow
def test_quick_gpt_rows_take_ratios_against_both_peers(quick: tuple[str, dict[str, dict[str, Any]]]) -> None:
    rows = {r["contestant"]: r for r in quick[1]["gpt_small"]["rows"]}
    assert rows["lightning_compile_fused"]["ratio_vs_lightning_compile_fused"] == 1.0
    for row in rows.values():
        assert row["step_ms"] > 0 and row["tokens_per_s"] > 0 and row["mfu"] > 0 and row["compile_s"] >= 0
        assert row["compiles_after_warmup"] == 0  # every compile fell in the warm-up
        # On the CPU no CUDA graph exists and no CUDA memory is counted, nor the host and device figures: null.
        assert row["cudagraph_recordings_after_warmup"] is None and row["peak_mem_gib"] is None
        assert row["host_ms_per_step"] is None and row["device_busy"] is None
        assert row["ratio_vs_lightning"] > 0 and row["rounds_measured"] == 1
    # runner's rows carry its report's decisions: auto is off without a GPU, and the graph-safe step runs.
    assert rows["runner_step"]["cudagraphs_decision"] == "off: cudagraphs=auto: no CUDA device"
    assert rows["runner_step"]["optimizer"] == "fused" and rows["runner_graphed"]["optimizer"] == "graphed"
    assert rows["lightning"]["cudagraphs_decision"] is None and rows["lightning"]["optimizer"] is None
    # The GPU machine had no Hydra: the contestants' processes import none of it.
    assert quick[1]["gpt_small"]["extra"]["hydra_modules"] == []


@pytest.mark.slow
def test_quick_hf_varlen_pads_recompiles_and_counts_tokens(quick: tuple[str, dict[str, dict[str, Any]]]) -> None:
    rows = {r["contestant"]: r for r in quick[1]["hf_varlen"]["rows"]}
    for row in rows.values():
        assert row["batches"] == 8 and row["wall_s"] > 0 and row["tokens_per_s"] > 0 and row["steady_step_ms"] > 0
        assert row["cudagraph_recordings"] == 0  # no CUDA graph on the CPU
        # From the fit's call: the first step, then the 8th; nothing compiles beside the run with --backend eager,
        # so every fit stops at 8 and its time to 40 batches is projected from the steady window before it.
        assert 0 < row["first_step_s"] < row["finish_s"] and row["finish_s"] >= row["wall_s"]
        assert row["end_batch"] == 8 and row["at_long_how"] == "projected" and row["long"] == 40
        assert row["at_long_s"] == pytest.approx(row["finish_s"] + 32 * row["steady_step_ms"] / 1e3)
    assert rows["runner_defaults"]["background"].startswith("compiled in the run: backend=eager")
    # Per-batch padding: the corpus's lengths vary, and the compiled peer recompiles when they do.
    assert rows["lightning"]["distinct_lengths"] > 1 and rows["lightning_compile"]["recompiles"] >= 1
    assert rows["lightning"]["compiles"] == 0
    # The bucket policy pads to a bucket: fewer lengths, more padding, the same real tokens.
    assert rows["runner_bucket"]["distinct_lengths"] < rows["lightning"]["distinct_lengths"]
    assert rows["runner_bucket"]["padding_pct"] > rows["lightning"]["padding_pct"]
    assert rows["runner_bucket"]["real_tokens"] == rows["lightning"]["real_tokens"]


@pytest.mark.slow
def test_quick_packing_rows_count_the_tokens_in_the_loss(quick: tuple[str, dict[str, dict[str, Any]]]) -> None:
    rows = {r["contestant"]: r for r in quick[1]["packing"]["rows"]}
    assert all(r["real_tokens_per_s"] > 0 and r["steps"] == 5 for r in rows.values())
    # Packed rows: one shape, so no recompile, and less padding than batches padded to their longest document.
    assert rows["runner_packed"]["recompiles"] == 0
    assert rows["runner_packed"]["padding_pct"] < rows["lightning"]["padding_pct"]
    assert rows["lightning"]["loss_share_pct"] == pytest.approx(100 - rows["lightning"]["padding_pct"])


@pytest.mark.slow
def test_quick_memory_and_cold_start_rows(quick: tuple[str, dict[str, dict[str, Any]]]) -> None:
    for row in quick[1]["memory"]["rows"]:
        # No memory cap on the CPU: the second fit runs at the reference batch, and no largest batch is claimed.
        assert row["peak_gib"] is None and row["max_batch"] is None and row["tries"] == [[4, "fits"]]
        assert row["run_batch"] == row["ref_batch"] == 4 and row["step_ms"] > 0 and row["tokens_per_s_at_max"] > 0
    for row in quick[1]["cold_start"]["rows"]:
        assert 0 < row["cold_first_step_s"] <= row["cold_tenth_step_s"]
        assert 0 < row["warm_first_step_s"] <= row["warm_tenth_step_s"] and row["warm_over_cold"] > 0
        assert row["cold_compiles"] >= 1
    # The cold and the warm jobs run in two processes: the first job of each says how long its start took.
    assert quick[1]["cold_start"]["rows"][0]["startup_s"] > 0


@pytest.mark.slow
def test_merge_replaces_by_key_keeps_the_rest_and_rewrites_the_tables(
        quick: tuple[str, dict[str, dict[str, Any]]], tmp_path: Path) -> None:
    results_path, docs = tmp_path / "gpu.json", tmp_path / "gpu.md"
    # The committed rows of gpt_124m only, whatever later sessions added: this test merges hf_varlen into them.
    committed = load(ROOT / "benchmarks" / "results" / "gpu.json")
    committed["rows"] = [r for r in committed["rows"] if r["workload"] == "gpt_124m"]
    committed["workloads"] = {k: v for k, v in committed["workloads"].items() if k == "gpt_124m"}
    results_path.write_text(json.dumps(committed))
    docs.write_text("intro\n<!-- gpu: hf_varlen -->\nold\n<!-- end gpu -->\n<!-- gpu: gpt_124m -->\n<!-- end gpu -->\n")
    before = load(results_path)
    quick_file = tmp_path / "quick.json"
    quick_file.write_text(json.dumps(quick[1]["hf_varlen"]))
    assert gpu.merge_files([quick_file], results_path, docs) == 2  # a --quick run is plumbing: never merged
    gpu_run = {**quick[1]["hf_varlen"], "quick": False, "device": "NVIDIA H100 80GB HBM3",
               "date": "2026-12-01T10:00:00", "units": 3}
    by_name = {r["contestant"]: r for r in gpu_run["rows"]}
    gpu_run["rows"] = [by_name["lightning"], by_name["runner_bucket"],
                       {"contestant": "lightning_compile", "label": "x", "error": "boom"}]
    run_file = tmp_path / "hf_varlen.json"
    run_file.write_text(json.dumps(gpu_run))
    assert gpu.merge_files([run_file], results_path, docs) == 0
    after = load(results_path)
    assert after["rows"][:len(before["rows"])] == before["rows"]  # gpt_124m's rows untouched, still first
    hf = [r for r in after["rows"] if r["workload"] == "hf_varlen"]
    assert [r["contestant"] for r in hf] == ["lightning", "lightning_compile", "runner_bucket"]  # the table's order
    assert all(r["device"] == "NVIDIA H100 80GB HBM3" and r["date"] == "2026-12-01T10:00:00" and
               set(ROW_META) <= r.keys() for r in hf)
    assert after["workloads"]["hf_varlen"]["units"] == 3
    # A later run whose lightning failed keeps the row that measured; a new measurement replaces it.
    later = {**gpu_run, "date": "2026-12-02T10:00:00",
             "rows": [{"contestant": "lightning", "label": "x", "error": "oom"}, {**gpu_run["rows"][1], "wall_s": 1.0}]}
    run_file.write_text(json.dumps(later))
    assert gpu.merge_files([run_file], results_path, docs) == 0
    hf = {r["contestant"]: r for r in load(results_path)["rows"] if r["workload"] == "hf_varlen"}
    assert "error" not in hf["lightning"] and hf["lightning"]["date"] == "2026-12-01T10:00:00"
    assert hf["runner_bucket"]["wall_s"] == 1.0 and hf["runner_bucket"]["date"] == "2026-12-02T10:00:00"
    text = docs.read_text()
    assert marked(text) == ["hf_varlen", "gpt_124m"] and "old" not in text and text.startswith("intro\n")
    assert "| `runner_bucket` |" in text and "2026-12-02 | NVIDIA H100 80GB HBM3 |" in text
    assert "| `lightning_compile` | failed: boom |" in text and "2026-11-26 | NVIDIA H200 |" in text


def test_need_order_plan_and_costs_with_fake_results() -> None:
    results = {"workloads": {"a": {"wall_s": 300.0, "units": 3, "quick": False},
                             "q": {"wall_s": 5, "units": 1, "quick": True}},
               "rows": [{"workload": w, "contestant": c, "date": d} for w, c, d in (
                   ("a", "x", "2026-11-03"), ("a", "y", "2026-11-05"), ("b", "x", "2026-11-01"),
                   ("b", "y", "2026-11-09"), ("c", "x", "2026-11-02"))]}
    order = need_order(results, {"a": ["x", "y"], "b": ["x", "y"], "c": ["x", "y"], "d": ["x"]})
    assert order == ["c", "d", "b", "a"]  # a contestant never measured first (given order), then the oldest row
    assert contestant_order(results, "c", ["x", "y"]) == ["y", "x"]
    assert unit_cost(results, "a", 50.0) == 100.0 and unit_cost(results, "q", 50.0) == 50.0  # quick: the default
    cost = {"r": 100.0, "s": 40.0, "m": 60.0, "n": 500.0}
    size = {"m": 3, "n": 2}
    # r (rounds) and s fit whole; m takes as many contestants as fit; n does not fit at all; then more rounds of r.
    assert plan(["r", "n", "m"], cost.__getitem__, size.__getitem__, {"r": 3}, 250.0) == [("r", 1), ("m", 2)]
    assert plan(["r", "s"], cost.__getitem__, size.get, {"r": 3, "s": 3}, 400.0) == [("r", 3), ("s", 2)]
    assert plan(["n"], cost.__getitem__, size.__getitem__, {}, 499.0) == []
    assert plan(["m"], cost.__getitem__, size.__getitem__, {}, float("inf")) == [("m", 3)]


def test_queue_spends_the_budget_in_order_of_need_and_replans_with_the_time_left() -> None:
    results = {"workloads": {"gpt_124m": {"wall_s": 200.0, "units": 1}, "memory": {"wall_s": 700.0, "units": 7}},
               "rows": [{"workload": "gpt_124m", "contestant": c, "date": "2026-11-26"}
                        for c in gpu.WORKLOADS["gpt_124m"].contestants]}
    now = [0.0]
    took = {"gpt_small": 100.0, "hf_varlen": 50.0, "memory": 100.0, "cold_start": 60.0, "gpt_124m": 200.0}
    ran: list[tuple[str, int]] = []

    def run_one(name: str, n: int) -> None:  # a workload as fast as its fake cost says
        ran.append((name, n))
        now[0] += took[name] if name != "hf_varlen" else 500.0  # hf_varlen takes far longer than expected

    said: list[str] = []
    gpu.queue(list(gpu.WORKLOADS), results, 760.0, run_one, clock=lambda: now[0], say=said.append)
    # Never-measured first: gpt_small (1 round, 150 s expected: it took 100), hf_varlen (6 x 100 s in the 660 left)...
    assert ran[:2] == [("gpt_small", 1), ("hf_varlen", 6)]
    # ...hf_varlen overran (500 s): re-planned with the 160 s really left, memory gets one contestant (100 s
    # each, from its last run), cold_start none (75 s expected, 60 left), gpt_124m (measured) none.
    assert ran[2:] == [("memory", 1)] and now[0] == 700.0
    assert any(s.startswith("== cold_start: skipped") for s in said) and any("gpt_124m: skipped" in s for s in said)


@dataclass
class _SpentAfterOneRow(Context):
    """The session's budget is spent once the run file holds a row (a clock the test controls)."""

    run_file: Path = Path()

    def left(self) -> float:
        rows = json.loads(self.run_file.read_text())["rows"] if self.run_file.exists() else []
        return -1.0 if rows else 100.0


@pytest.mark.slow
def test_a_run_cut_short_keeps_what_it_measured(tmp_path: Path) -> None:
    """One child per contestant (the GPU's way); the budget is spent after the first: its row is in the run
    file, written as it finished, and the second contestant, never started, gets no row."""
    names = {"one": "1", "two": "2"}
    jobs = lambda ctx, name: [{"call": "json:loads", "args": {"s": json.dumps({"value": len(name)})}}]  # noqa: E731
    work = Workload("fake", lambda quick: "a fake workload", names, 1.0,
                    contestant_runner("fake", names, jobs, lambda results: {"value": results[0]["value"]}, 120), [])
    ctx = _SpentAfterOneRow(False, "eager", tmp_path, run_file=tmp_path / "fake.json")
    out = RunFile(ctx.run_file, work, ctx, 2)
    work.run(ctx, out, 2)
    written = json.loads(ctx.run_file.read_text())
    assert [(r["contestant"], r["value"]) for r in written["rows"]] == [("one", 3)]
    assert written["units"] == 1 and written["complete"] is False
    assert run_jobs([{"call": "json:loads", "args": {"s": "{}"}}], ctx, 10) == [{"error": NOT_STARTED}]


def test_results_keep_the_h200_rows_and_docs_tables_are_what_the_results_write() -> None:
    results = load()
    keys = [(r["workload"], r["contestant"]) for r in results["rows"]]
    assert len(keys) == len(set(keys)) and all(set(ROW_META) <= r.keys() for r in results["rows"])
    h200 = [r for r in results["rows"] if r["device"] == "NVIDIA H200" and r["date"].startswith("2026-11-26")]
    # Every contestant of that session (those added since wait for a GPU: the queue takes them first).
    assert {r["contestant"] for r in h200 if r["workload"] == "gpt_124m"} == {
        "lightning", "lightning_compile_fused", "lightning_compile_reduce_overhead", "runner_step", "runner_cudagraphs",
        "runner_best"}
    text = gpu.DOCS.read_text()
    assert marked(text) == list(gpu.WORKLOADS)  # every workload has its table
    assert render(text, results, gpu.WORKLOADS) == text, (
        "docs/gpu.md's tables are out of date: .venv/bin/python benchmarks/gpu.py --docs")


def test_largest_batch_follows_the_line_through_the_two_peaks() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gpu_workloads.jobs import largest_batch, out_of_memory
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    gib = 2**30
    # 6 GiB of weights and optimizer state, 3 GiB per sample: 24 GiB holds 6 samples.
    assert largest_batch(2, 12 * gib, 4, 18 * gib, 24 * gib) == pytest.approx(6.0)
    assert largest_batch(2, 12 * gib, 4, 12 * gib, 24 * gib) is None  # the batch did not move the peak
    wrapped = RuntimeError("compile failed")
    wrapped.__cause__ = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert out_of_memory(wrapped) and not out_of_memory(RuntimeError("shape mismatch"))


def test_reference_peers_are_raced_first_and_by_every_run() -> None:
    """Eager Lightning runs before any other hf_varlen contestant, measured or not, and no shorter contestant list
    leaves it out; then contestants never measured, then the oldest."""
    results = {"workloads": {}, "rows": [{"workload": "hf_varlen", "contestant": c, "date": d} for c, d in (
        ("lightning", "2026-11-30"), ("runner_bucket", "2026-11-01"), ("lightning_compile", "2026-11-20"))]}
    hf = gpu.WORKLOADS["hf_varlen"]
    assert hf.first == ("lightning",) and list(hf.contestants)[0] == "lightning"
    order = contestant_order(results, "hf_varlen", list(hf.contestants), hf.first)
    assert order[0] == "lightning" and order[-2:] == ["runner_bucket", "lightning_compile"]
    assert order[1:4] == ["runner_defaults", "runner_best", "runner_dynamic"]  # never measured, in the given order
    only = Context(False, "eager", Path("."), only=frozenset({"runner_best"}))
    assert only.pick(list(hf.contestants), hf.first) == ["lightning", "runner_best"]
    assert only.pick(["x", "y"], ("x",)) == ["x", "y"]  # a list naming none of a workload's: all of them
    assert set(gpu.WORKLOADS["gpt_small"].first) == {"lightning", "lightning_compile_fused"}


def _finish_fit(pending: Any, n: int = 4, steady: int = 2, long: int = 12) -> tuple[Any, dict[str, Any], int]:
    import lightning as L

    from tests.helpers import tiny_data, tiny_module

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gpu_workloads.hf_job import Finish
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    finish = Finish(n, steady, long, "cpu", pending=pending)
    trainer = L.Trainer(max_steps=long, callbacks=[finish], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    started = time.perf_counter()
    trainer.fit(tiny_module(), tiny_data())
    return finish, finish.figures(started, long), trainer.global_step


def test_hf_varlen_stops_at_its_batches_or_trains_on_past_a_pending_compile() -> None:
    """``Finish`` with the compile beside the run given: none (stops at batch 4, the window before it), one
    pending until batch 7 (the window from the switch, 2 batches without compiling: stops at 9) and one never
    ready (trains to ``long``, measured there)."""
    finish, figures, steps = _finish_fit(lambda trainer: False)
    assert steps == 4 and finish.window == (2, 4) and figures["switch_batch"] is None
    assert figures["at_long_how"] == "projected" and figures["end_batch"] == 4 and figures["settled"]
    assert figures["at_long_s"] == pytest.approx(figures["end_s"] + 8 * figures["end_step_ms"] / 1e3)
    assert 0 < figures["first_step_s"] < figures["finish_s"] == figures["end_s"]
    finish, figures, steps = _finish_fit(lambda trainer: trainer.global_step < 7)
    assert steps == 9 and finish.window == (7, 9) and figures["switch_batch"] == 7 and figures["end_batch"] == 9
    assert figures["finish_s"] < figures["end_s"] and figures["at_long_how"] == "projected"
    finish, figures, steps = _finish_fit(lambda trainer: True)
    assert steps == 12 and finish.window == (4, 12) and figures["switch_batch"] is None
    assert figures["at_long_how"] == "measured" and figures["at_long_s"] == figures["end_s"]


HF_ROWS: list[dict[str, Any]] = [{"device": "H100", "batches": 300, **row} for row in (
    {"contestant": "lightning", "finish_s": 10.0, "first_step_s": 0.5, "end_batch": 300, "end_s": 10.0,
     "end_step_ms": 30.0, "at_long_s": 91.0, "at_long_how": "projected"},
    {"contestant": "lightning_compile", "finish_s": 40.0, "first_step_s": 30.0, "end_batch": 300, "end_s": 40.0,
     "end_step_ms": 20.0, "at_long_s": 94.0, "at_long_how": "projected"},
    {"contestant": "runner_defaults", "finish_s": 9.5, "first_step_s": 0.52, "end_batch": 2000, "end_s": 70.0,
     "end_step_ms": 15.0, "at_long_s": 85.0, "at_long_how": "projected", "settled": True},
    {"contestant": "runner_bucket", "finish_s": 60.0, "first_step_s": 56.0, "end_batch": 300, "end_s": 60.0,
     "end_step_ms": 17.6, "at_long_s": 107.52, "at_long_how": "projected"},
    {"contestant": "runner_dynamic", "finish_s": 50.0, "end_batch": 300, "end_s": 50.0, "end_step_ms": 31.0},
)]


def test_hf_varlen_break_even_and_targets_from_given_rows() -> None:
    rows = {r["contestant"]: r for r in HF_ROWS}
    assert break_even(HF_ROWS, rows["runner_defaults"]) == "at once"  # sooner at 300 already
    assert break_even(HF_ROWS, rows["lightning_compile"]) == "3,300"  # (40 - 6) - (10 - 9) over 10 ms a batch
    assert break_even(HF_ROWS, rows["runner_dynamic"]) == "never"  # its step is no faster
    assert break_even(HF_ROWS, rows["lightning"]) == "-"
    targets = gpu.WORKLOADS["hf_varlen"].targets(HF_ROWS)
    assert targets[:3] == [
        "runner's defaults finish the 300 batches in 0.95x eager Lightning's time (target <= 1.0x: met)",
        "runner's defaults' first trained step 1.04x eager Lightning's (target <= 1.1x: met)",
        "runner's defaults finish 3,000 batches 1.07x as fast as the best Lightning contestant with a figure there "
        "(lightning, projected; target >= 1.5x: missed)"]
    results = {"workloads": {"hf_varlen": {"describe": "d", "date": "2026-12-01", "device": "H100", "torch": "2.11",
                                           "command": "c", "complete": True}},
               "rows": [{"workload": "hf_varlen", "date": "2026-12-01", **r} for r in HF_ROWS]}
    text = table(gpu.WORKLOADS["hf_varlen"], results)
    assert "| `runner_defaults` | 9.5 | 0.95 | 0.52 | 1.04 | - | ~85.0 | at once |" in text, text


def test_gpt_rows_say_what_they_decide_for_the_gpu_defaults() -> None:
    def row(name: str, ms: float, **extra: Any) -> dict[str, Any]:
        return {"contestant": name, "device": "NVIDIA H100", "round_step_ms": [ms, ms], **extra}

    rows = [row("lightning_compile_reduce_overhead", 16.0), row("runner_step", 11.0, device_busy=0.9),
            row("runner_cudagraphs_disabled", 11.0), row("runner_cudagraphs", 10.0), row("runner_graphed", 10.5)]
    said = gpu.WORKLOADS["gpt_small"].targets(rows)
    assert said == [
        "runner's defaults 1.45x as fast as lightning_compile_reduce_overhead (target >= 1.5x: missed)",
        "runner's defaults keep the device busy 90% of the time (target >= 85%: met)",
        "gpu_defaults.CUDAGRAPHS_AUTO: runner_cudagraphs / runner_cudagraphs_disabled step time 0.909 (it stays True)",
        "gpu_defaults.CUDAGRAPHS_AUTO: runner_step / runner_cudagraphs_disabled step time 1.000 (it stays True)",
        "gpu_defaults.OPTIMIZER_AUTO_GRAPHED: runner_graphed / runner_cudagraphs step time 1.050 (the graphed step "
        "slower: it stays False)"], said
    on_cpu = [{**r, "device": "cpu (2 cores)"} for r in rows]  # no CUDA graphs: nothing said about the defaults
    assert not any("gpu_defaults" in line for line in gpu.WORKLOADS["gpt_small"].targets(on_cpu))


@pytest.mark.slow
@pytest.mark.gpu_prep
def test_dry_run_gets_through_in_the_gpu_like_venv(tmp_path: Path) -> None:
    """``scripts/gpu_session.sh --dry-run``: the venv of Python 3.12, PyPI's torch 2.11.0, Lightning and pytest
    only (built once, ~2-5 min, then reused) plus the carried wheels (built once, ~1 min): the CLI, the gpu tests
    collected under torch 2.11, and every workload with --quick. The contestants: one of runner's per workload
    (and the GPT peers), eager backend: the Lightning peers' code is the fast test's, and imports nothing
    more); before a GPU session the whole dry run races them all."""
    started = time.monotonic()
    args = " ".join(["--backend eager --contestants", *DRY_CONTESTANTS])
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_session.sh"), "--dry-run"], cwd=ROOT,
                          env={**os.environ, "OUT": str(tmp_path), "GPU_BENCH_ARGS": args},
                          capture_output=True, text=True, timeout=1800)
    summary = (tmp_path / "summary.txt").read_text() if (tmp_path / "summary.txt").exists() else ""
    logs = {p.name: p.read_text()[-2000:] for p in tmp_path.glob("*.log")}
    assert proc.returncode == 0, summary + proc.stderr[-2000:] + json.dumps(logs)[-6000:]
    parts = [line.split(":")[0] for line in summary.splitlines() if ": exit " in line]
    assert parts == ["versions", "quickstart", "pytest-gpu", "workloads"] or parts == [
        "versions", "pytest-gpu", "quickstart", "workloads"], summary
    runs = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "rows").glob("*.json")}
    assert set(runs) == set(DRY_EXPECTED)
    for name, run in runs.items():
        assert [r["contestant"] for r in run["rows"]] == DRY_EXPECTED[name], name
        assert all("error" not in r for r in run["rows"]), (name, run["rows"])
        assert run["torch"].startswith("2.11.0"), run["torch"]  # the GPU machines' torch, not .venv's
    # Every gpu test collected (imported under torch 2.11 with the carried wheels) and skipped: no CUDA here.
    assert re.search(r"^\d+ skipped in ", logs["pytest-gpu.log"], re.MULTILINE), logs["pytest-gpu.log"]
    print(f"dry run: {time.monotonic() - started:.0f} s")
