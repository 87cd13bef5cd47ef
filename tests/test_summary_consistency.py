"""What a user sees after real runs through ``python -m runner``: a two-run sweep with every logger (Hydra's
multirun: a dir per job, the sweep's summary, each logger's offline files), then a resume. The console table,
``report.md``, ``report.json`` and the sweep's ``summary.md`` agree with each other and with the rules of
``runner.telemetry.definitions``; the console carries none of the libraries'
noise; a resumed run shows the speedup measured before it, and its bar counts steps. A DPO sweep over beta, its
data named by an absolute path: a directory per job, ranked by its validation figures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.telemetry.verdict import break_even_cell, break_even_text, contradictions, missing_speedup

ROOT = Path(__file__).resolve().parents[1]
# A tiny GPT, Dynamo's eager backend: seconds per run, 4 eager/compiled pairs.
SMALL = ["+recipe=smoke", "trainer.max_steps=16", "telemetry.speedup_steps=4", "trainer.val_check_interval=8"]
# DPO with the recipe's pairs named by an absolute path, 4 steps and one validation of 16 pairs.
PAIRS = ROOT / "examples" / "data" / "preference.jsonl"
DPO = ["+recipe=llama_dpo", "compile.backend=eager", f"data.path={PAIRS}", "trainer.max_steps=4",
       "trainer.val_check_interval=4", "trainer.limit_val_batches=2", "trainer.checkpoint_every_n_steps=4",
       "telemetry.speedup_steps=0"]
NOISE = ("anonymous", "Run history", "Run summary", "v_num", "litlogger", "LeafSpec", "log_every_n_steps",
         "Traceback", "AdamW has a fused", "Previous log files")


def _runner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}, "WANDB_MODE": "offline",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def _table(console: str, title: str) -> list[dict[str, str]]:
    """Every printed summary table titled ``title``: its rows as {label: value}."""
    tables: list[dict[str, str]] = []
    for block in console.split(title)[1:]:
        rows = {}
        for line in block.splitlines():
            if line.startswith("└"):
                break
            cells = [c.strip() for c in line.strip("│ ").split("│")]
            if len(cells) == 2 and cells[1]:
                rows[cells[0]] = cells[1]
        tables.append(rows)
    return tables


def _md_rows(md: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| ([^|]+?) \| ([^|]+?) \| [^|]*\|$", md, re.M)}


def _check_run(report: dict[str, Any], md: str, table: dict[str, str]) -> None:
    """One run's three outputs against each other and the rules."""
    assert contradictions(report) == [], contradictions(report)
    speedup = report.get("perf/speedup_x")
    rows = _md_rows(md)
    if speedup is None:
        assert table["speedup [x]"] == rows["speedup [x]"] == missing_speedup(report)
        assert "break-even step" not in table and "perf/break_even_step" not in report
    else:
        never = speedup <= 1
        assert (report["perf/break_even_step"] == "never") == never == (break_even_text(report) == "never")
        assert table["break-even step"] == rows["break-even step"] == break_even_cell(report)
        p25, p75 = report["perf/speedup_p25_x"], report["perf/speedup_p75_x"]
        assert p25 <= speedup <= p75
        assert table["speedup [x]"] == rows["speedup [x]"] == f"{speedup:.4g} ({p25:.4g} to {p75:.4g})"
        assert float(table["eager step [ms]"]) == pytest.approx(report["perf/eager_step_ms"], rel=1e-3)
        assert float(table["compiled step [ms]"]) == pytest.approx(report["perf/compiled_step_ms"], rel=1e-3)
        assert table["pairs at steps"] == rows["pairs at steps"]
        assert table["pairs at steps"].startswith(f"{report['perf/speedup_steps']} (4 pairs)")
    # "step, last 50" is its own row, never a bare "step [ms]" beside the pairs' medians.
    assert float(table["step, last 50 [ms]"]) == pytest.approx(report["perf/step_ms"], rel=1e-3)
    assert "step [ms]" not in table and "**Result:**" in md


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    sweep_dir = tmp_path_factory.mktemp("sweep") / "s"
    proc = _runner("-m", *SMALL, "compile=eager,step", "logger=all", f"hydra.sweep.dir={sweep_dir}", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep_dir, proc


@pytest.mark.slow
def test_every_output_of_a_sweep_agrees(sweep: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    sweep_dir, proc = sweep
    tables = _table(proc.stdout, "runner: smoke")
    # Job directories: "<n>-compile=eager,logger=all,...": named here by their first override.
    jobs = {d.name.split("-", 1)[1].split(",")[0]: d for d in sweep_dir.iterdir() if (d / "report.json").is_file()}
    assert sorted(jobs) == ["compile=eager", "compile=step"] and len(tables) == 2
    reports = {job: json.loads((d / "report.json").read_text()) for job, d in jobs.items()}
    for job, table in zip(("compile=eager", "compile=step"), tables, strict=True):  # Hydra runs them in order
        _check_run(reports[job], (jobs[job] / "report.md").read_text(), table)
    assert reports["compile=eager"]["perf/speedup_status"] == "nothing compiled"
    assert reports["compile=step"]["perf/speedup_status"] == "measured"

    summary = (sweep_dir / "summary.md").read_text()
    rows = {m.group(1): m.group(2).split(" | ") for m in re.finditer(r"^\| \d \| `([^`]+)` \| (.*) \|$", summary, re.M)}
    header = re.search(r"^\| # \| run \| (.*) \|$", summary, re.M)
    assert header is not None
    columns = header.group(1).split(" | ")
    for job, cells in rows.items():
        cell = dict(zip(columns, cells, strict=True))
        assert cell["break-even step"] in (break_even_cell(reports[job]), "-")
        assert (cell["break-even step"] == "-") == ("perf/break_even_step" not in reports[job])
    assert dict(zip(columns, rows["compile=eager"], strict=True))["speedup [x]"] == "nothing compiled"
    assert "best speedup" not in summary and "What the columns measure:" in summary
    assert (sweep_dir / "summary.png").stat().st_size > 5000


@pytest.mark.slow
def test_a_sweep_writes_one_dir_per_job_and_every_logger_writes_offline(
        sweep: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """Hydra's multirun: one run dir per job with its report; the sweep's summary names each job by the overrides
    that differ; ``logger=all`` gives each job wandb's offline run, TensorBoard's events and the CSV rows."""
    sweep_dir, _ = sweep
    job_dirs = sorted(d for d in sweep_dir.iterdir() if (d / "report.json").is_file())
    assert len(job_dirs) == 2
    assert {json.loads((d / "report.json").read_text())["compile/scope"] for d in job_dirs} == {"none", "step"}
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert {r["job"] for r in summary["runs"]} == {"compile=eager", "compile=step"}
    assert "# Sweep summary" in (sweep_dir / "summary.md").read_text()
    for d in job_dirs:
        assert list((d / "wandb").glob("offline-run-*")), f"wandb wrote no offline run in {d.name}"
        assert list((d / "tensorboard").rglob("events.out.tfevents.*")), f"TensorBoard wrote no events in {d.name}"
        assert (d / "csv" / "metrics.csv").stat().st_size > 0


@pytest.mark.slow
def test_the_console_is_quiet_and_the_log_file_keeps_the_details(
        sweep: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    sweep_dir, proc = sweep
    console = proc.stdout + proc.stderr
    for noise in NOISE:
        assert noise not in console, noise
    (stack,) = [line for line in console.splitlines() if "compile stack: scope=step" in line]
    assert len(stack) < 150, stack  # one short line (it was 300 characters); details go to the log file
    log = next(sweep_dir.glob("*-compile=step,*/*.log")).read_text()
    assert "compile stack: scope=step" in log
    assert re.search(r"Epoch 0 \S+ 16/16 ", console)  # steps out of max_steps


@pytest.mark.slow
def test_a_resumed_run_reports_the_speedup_measured_before_it(
        sweep: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    sweep_dir, _ = sweep
    job = next(sweep_dir.glob("*-compile=step,*"))
    before = json.loads((job / "report.json").read_text())
    # 4 more steps: the warm-up, the FLOP step and one pair's first step, too few for the resumed run's own pairs.
    proc = _runner(*SMALL, "compile=step", f"hydra.run.dir='{job}'", "ckpt_path=last", "trainer.max_steps=20", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = json.loads((job / "report.json").read_text())
    assert after["run/steps"] == 20 and after["perf/speedup_status"] == "measured before the resume"
    for key in ("perf/speedup_x", "perf/speedup_p25_x", "perf/eager_step_ms", "perf/break_even_step",
                "perf/speedup_steps"):
        assert after[key] == before[key], key
    (table,) = _table(proc.stdout, "runner: smoke")
    assert table["pairs at steps"].endswith("(4 pairs), before the resume")
    _check_run(after, (job / "report.md").read_text(), table)
    assert "result: before the resume," in proc.stdout
    console = proc.stdout + proc.stderr
    assert re.search(r"Epoch 0 \S+ 20/20 ", console) and "/4 " not in console


@pytest.fixture(scope="module")
def preference_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sweep_dir = tmp_path_factory.mktemp("dpo") / "s"
    proc = _runner("-m", *DPO, "objective.beta=0.1,0.5", f"hydra.sweep.dir={sweep_dir}", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep_dir


@pytest.mark.slow
def test_a_job_dir_is_one_directory_whatever_its_overrides_hold(preference_sweep: Path) -> None:
    """An override holding an absolute path (``data.path=/...``) nested each job's directory one level per ``/``
    (issue 85): each job's directory is the sweep dir's child, the path's ``/`` read as ``_``."""
    reports = sorted(preference_sweep.rglob("report.json"))
    assert len(reports) == 2 and all(r.parent.parent == preference_sweep for r in reports), reports
    assert all(f"data.path={str(PAIRS).replace('/', '_')}," in r.parent.name for r in reports), reports


@pytest.mark.slow
def test_a_preference_sweep_ranks_by_its_validation_figures(preference_sweep: Path) -> None:
    """Jobs that train differently (another beta) are ranked by what DPO minimised, TRL's validation accuracy and
    loss, shown first; not by the speedup beside a bits-per-byte column DPO has no figure for (issue 85)."""
    summary = (preference_sweep / "summary.md").read_text()
    header = re.search(r"^\| # \| run \| (.*) \|$", summary, re.M)
    assert header is not None, summary
    columns = header.group(1).split(" | ")
    assert columns[:3] == ["val rewards/accuracies", "val loss", "speedup [x]"] and "val bits/byte" not in columns
    assert "Ranked by val rewards/accuracies, then val loss, speedup," in summary
    reports = [json.loads(p.read_text()) for p in preference_sweep.glob("*/report.json")]
    best_first = sorted(reports, key=lambda r: (-r["val/rewards/accuracies"], r["val/loss"]))
    rows = [m.groups() for m in re.finditer(r"^\| \d \| `([^`]+)` \| ([^|]+) \| ([^|]+) \|", summary, re.M)]
    assert rows == [(f"objective.beta={r['objective/beta']}", f"{r['val/rewards/accuracies']:.4g}",
                     f"{r['val/loss']:.4g}") for r in best_first], summary
