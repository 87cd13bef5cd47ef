"""``benchmarks/results/gpu.json``: every GPU workload's rows, keyed by (workload, contestant), folded in run by run.

A run of ``gpu.py`` writes one file per workload (``RUN_KEYS`` and its ``rows``), rewritten after every
contestant, so a run cut short keeps what it measured. ``merge`` folds such a file into the results: each of
its rows replaces the row of the same (workload, contestant) and carries the run's date, device, torch,
Lightning, rounds and commit; rows of other contestants and workloads stay as they were. A failed row
(``error``) replaces nothing that measured: it is kept only where no row was. The results also hold, per
workload, what its newest run was (``workloads``): the queue reads its wall time as the workload's expected
cost (per unit: a round, or a contestant), and the need order reads the rows' dates.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results" / "gpu.json"
ROW_META = ("date", "device", "torch", "lightning", "rounds", "commit")
"""What every merged row carries about the run that measured it."""
RUN_KEYS = (*ROW_META, "workload", "describe", "command", "quick", "wall_s", "units", "complete", "extra")
"""A run file's keys besides ``rows``."""


def load(path: Path = RESULTS) -> dict[str, Any]:
    """The results (empty when the file does not exist yet)."""
    if not path.exists():
        return {"workloads": {}, "rows": []}
    return json.loads(path.read_text())


def write_json(path: Path, data: Any) -> None:
    """``data`` as indented JSON, written atomically: a reader (or a kill) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def now() -> str:
    """The date format of every row: local time to the second."""
    return datetime.datetime.now().isoformat(timespec="seconds")


def merge(results: dict[str, Any], run: dict[str, Any], order: Callable[[str, str], tuple[int, int]]) -> list[str]:
    """Fold ``run`` (one workload's run file) into ``results`` in place; what it did, one line per row.
    ``order(workload, contestant)`` sorts the rows (the workloads' and their contestants' order)."""
    workload = run["workload"]
    meta = {key: run.get(key) for key in ROW_META}
    rows = {(r["workload"], r["contestant"]): r for r in results["rows"]}
    said = []
    for row in run["rows"]:
        key = (workload, row["contestant"])
        old = rows.get(key)
        if "error" in row and old is not None and "error" not in old:
            said.append(f"{workload}/{row['contestant']}: failed in this run, kept the row of {old['date']}")
            continue
        rows[key] = {"workload": workload, **row, **meta}
        said.append(f"{workload}/{row['contestant']}: " + ("failed" if "error" in row else "measured"))
    results["rows"] = sorted(rows.values(), key=lambda r: order(r["workload"], r["contestant"]))
    results["workloads"][workload] = {key: run.get(key) for key in RUN_KEYS if key != "workload"}
    return said


def measured_dates(results: dict[str, Any], workload: str, contestants: Sequence[str]) -> list[str | None]:
    """Each contestant's date of its newest row that measured (None: never measured)."""
    dates = {r["contestant"]: r["date"] for r in results["rows"] if r["workload"] == workload and "error" not in r}
    return [dates.get(c) for c in contestants]


def need_order(results: dict[str, Any], workloads: Mapping[str, Sequence[str]]) -> list[str]:
    """Workloads (or, given one workload's contestants as ``{name: [name]}``, contestants) in order of need:
    one with a contestant never measured first (in the given order), then the one whose oldest row is
    oldest. ``workloads``: each workload's contestants."""
    def oldest(name: str) -> str:
        dates = measured_dates(results, name, workloads[name])
        return "" if None in dates else min(d for d in dates if d is not None)

    return sorted(workloads, key=oldest)  # a stable sort: never measured keeps the given order


def contestant_order(results: dict[str, Any], workload: str, contestants: Sequence[str],
                     first: Sequence[str] = ()) -> list[str]:
    """A workload's contestants in order of need: its reference peers ``first`` (in the given order), then never
    measured (in the given order), then oldest."""
    dates = dict(zip(contestants, measured_dates(results, workload, contestants), strict=True))
    return sorted(contestants, key=lambda c: (c not in first, "" if c in first else dates[c] or ""))


def unit_cost(results: dict[str, Any], workload: str, default_s: float) -> float:
    """Expected seconds of one unit of ``workload`` (a round, or one contestant): its last run on a GPU's wall
    time over the units it ran, or ``default_s`` where it never ran there."""
    last = results["workloads"].get(workload) or {}
    if not last.get("wall_s") or last.get("quick") or not last.get("units"):
        return default_s
    return float(last["wall_s"]) / int(last["units"])


def plan(order: Sequence[str], unit: Callable[[str], float], units: Callable[[str], int],
         max_rounds: dict[str, int], budget_s: float) -> list[tuple[str, int]]:
    """What to run, in order, and how many units each: every workload in ``order`` whose whole run fits what
    is left of ``budget_s``: one round of a workload measured in rounds (those in ``max_rounds``), every
    contestant (``units(name)``) of the others. One of the others that does not fit whole runs as many of its
    contestants as fit, if one does; a round that does not fit is skipped. What is still left then goes to
    more rounds (up to ``max_rounds``), in the same order: coverage first, then headline rounds."""
    chosen: list[list[Any]] = []
    left = budget_s
    for name in order:
        cost = unit(name)
        fits = units(name) if cost <= 0 or math.isinf(left) else int(left // cost)
        n = (1 if cost <= left else 0) if name in max_rounds else min(units(name), fits)
        if n >= 1:
            chosen.append([name, n])
            left -= n * cost
    for item in chosen:
        while item[0] in max_rounds and item[1] < max_rounds[item[0]] and unit(item[0]) <= left:
            left -= unit(item[0])
            item[1] += 1
    return [(name, n) for name, n in chosen]
