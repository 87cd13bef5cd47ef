"""What every workload of ``gpu.py`` shares: its description, the contestants' processes, its run file.

A workload's contestants train in child processes (``gpu_workloads/child.py``). On a GPU every job (one
contestant, one round or phase) gets a fresh interpreter, so no contestant inherits another's allocator,
caches or compiled code; with ``--quick`` (plumbing on the CPU) a workload's jobs of one round or phase share
one child, since starting an interpreter that imports torch and Lightning costs more than the tiny job. The
driver (``gpu.py`` and these modules) never imports torch.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from gpu_workloads.results import now, write_json

CHILD = Path(__file__).resolve().parent / "child.py"
Row = dict[str, Any]
Column = tuple[str, Callable[[Row, list[Row]], str]]
"""A table column: its header, and its cell for a row (given every row of the workload, for ratios)."""


@dataclass
class Context:
    """One run of the workloads: where, how, and until when."""

    quick: bool
    backend: str
    scratch: Path
    deadline: float = float("inf")
    """``time.monotonic()`` past which no job starts and running ones are stopped."""
    shared: dict[str, Any] = field(default_factory=dict)
    """What one workload measured that another reuses in the same run (the device's matmul peak), and the
    results the contestants' order of need is read from (``results``)."""
    only: frozenset[str] = frozenset()
    """Contestants to run (``--contestants``): a workload naming none of them runs all of its own."""

    @property
    def device(self) -> str:
        return "cpu" if self.quick else "cuda"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def pick(self, contestants: Sequence[str], first: Sequence[str] = ()) -> list[str]:
        """The contestants of a workload this run races (``only``, where it names any of them), ``first`` (a
        workload's reference peers) always among them."""
        listed = [c for c in contestants if c in self.only or (c in first and self.only & set(contestants))]
        return listed or list(contestants)


@dataclass(frozen=True)
class Workload:
    """A workload: its contestants, what it costs, how it runs, and its docs table."""

    name: str
    describe: Callable[[bool], str]
    """The sizes in words (argument: ``--quick``)."""
    contestants: dict[str, str]
    """Each contestant's name and what it is, in the order they run and appear."""
    unit_cost_s: float
    """Expected seconds of one unit on a GPU (a round, or one contestant) before it was ever measured there."""
    run: Callable[[Context, RunFile, int], None]
    """Runs the workload, updating the run file as each contestant finishes; the last argument is the
    number of units: rounds, or how many contestants (in their order of need)."""
    columns: Sequence[Column]
    """The docs table's columns after the contestant (date and device follow)."""
    targets: Callable[[list[Row]], list[str]] = lambda rows: []
    """The issue's targets, each a line saying what the rows show."""
    max_rounds: int | None = None
    """Measured in rounds (every contestant each round), up to this many; None: in contestants."""
    first: tuple[str, ...] = ()
    """The reference peers: raced by every run of the workload (no shorter contestant list leaves them out), and
    before every other contestant, measured or not."""


class RunFile:
    """One workload's run file (``gpu_workloads.results.RUN_KEYS`` and ``rows``), rewritten on every update."""

    def __init__(self, path: Path, workload: Workload, ctx: Context, rounds: int) -> None:
        self.path, self.started = path, time.monotonic()
        self.data: dict[str, Any] = {
            "workload": workload.name, "describe": workload.describe(ctx.quick), "date": now(),
            "device": None, "torch": version("torch"), "lightning": version("lightning"), "rounds": rounds,
            "commit": _commit(), "command": shlex.join(["python", *sys.argv]), "quick": ctx.quick,
            "wall_s": 0.0, "units": 0, "complete": False, "extra": {}, "rows": []}

    def update(self, rows: list[Row], results: list[Row], complete: bool = False, **extra: Any) -> None:
        """The rows measured so far, from the children's ``results`` (the device is the first one's that
        names it), and the workload's other figures; ``complete`` once every job ran."""
        self.data["device"] = self.data["device"] or next((r["device"] for r in results if "device" in r), None)
        self.data.update(rows=rows, complete=complete, wall_s=time.monotonic() - self.started)
        self.data["extra"].update(extra)
        write_json(self.path, self.data)


def _commit() -> str | None:
    """The checkout's commit (None outside a git checkout, as on a machine that got a copy of the tree)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).parent, check=False)
    except OSError:
        return None
    return out.stdout.strip() or None


def spawn(jobs: list[dict[str, Any]], ctx: Context, timeout: float, env: dict[str, str] | None = None) -> list[Row]:
    """Run ``jobs`` (each ``{"call": "module:function", "args": {...}}``) in one fresh interpreter; one
    result per job: what the call returned, or ``{"error": ...}``. Jobs the child finished before it died
    or ran out of time keep their results. The timeout is cut to what is left before the deadline."""
    stamp = time.monotonic_ns()
    jobs_path, result = ctx.scratch / f"jobs-{stamp}.json", ctx.scratch / f"result-{stamp}.json"
    jobs_path.write_text(json.dumps(jobs))
    limit = max(1.0, min(timeout, ctx.left()))
    spawned = time.time()
    try:
        proc = subprocess.run([sys.executable, str(CHILD), str(jobs_path), str(result), str(spawned)],
                              capture_output=True, text=True, timeout=limit, check=False, cwd=ctx.scratch,
                              env={**os.environ, **(env or {})})
        why = f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    except subprocess.TimeoutExpired:
        why = f"not finished within {limit:.1f} s" + (" (what was left of the budget)" if limit < timeout else "")
    done = json.loads(result.read_text()) if result.exists() else []
    return done + [{"error": why}] * (len(jobs) - len(done))


NOT_STARTED = "not started: the session's budget was spent"


def unfinished_s(row: Row) -> float | None:
    """The seconds a contestant ran without finishing (its job's time limit), from its error; None otherwise."""
    found = re.search(r"(?:no result|not finished) within ([0-9.]+) s", row.get("error") or "")
    return float(found.group(1)) if found else None


def run_jobs(jobs: list[dict[str, Any]], ctx: Context, timeout: float, env: dict[str, str] | None = None,
             on_result: Callable[[int, Row], None] | None = None) -> list[Row]:
    """``jobs`` in one child each (GPU), or with ``--quick`` the jobs of one ``group`` (a job's key, default
    0) in one child, the groups in the order they first appear; each result is handed to
    ``on_result(index, result)`` as soon as its child ends. A job not started before the deadline gets
    ``{"error": NOT_STARTED}``."""
    if ctx.quick:
        keys = list(dict.fromkeys(job.get("group", 0) for job in jobs))
        groups = [[i for i, job in enumerate(jobs) if job.get("group", 0) == key] for key in keys]
    else:
        groups = [[i] for i in range(len(jobs))]
    results: list[Row] = [{} for _ in jobs]
    for group in groups:
        if ctx.left() <= 0:
            out = [{"error": NOT_STARTED}] * len(group)
        else:
            out = spawn([jobs[i] for i in group], ctx, timeout * len(group), env)
        for i, r in zip(group, out, strict=True):
            results[i] = r
            if on_result is not None:
                on_result(i, r)
    return results


def cell(value: Any, spec: str) -> str:
    """``value`` formatted with ``spec``, ``-`` where null."""
    return "-" if value is None else format(value, spec)


def fmt(key: str, spec: str) -> Callable[[Row, list[Row]], str]:
    """A column's cells: ``row[key]`` formatted with ``spec``."""
    return lambda row, rows: cell(row.get(key), spec)


def ratio(rows: list[Row], key: str, peer: str, row: Row) -> float | None:
    """``row[key]`` over the same figure of contestant ``peer`` measured on the same device (None where
    either is missing)."""
    other = next((r for r in rows if r["contestant"] == peer and r.get("device") == row.get("device")), None)
    if other is None or not row.get(key) or not other.get(key):
        return None
    return float(row[key]) / float(other[key])
