"""docs/gpu.md's measured tables, written from ``benchmarks/results/gpu.json``.

Each table sits between ``<!-- gpu: WORKLOAD -->`` and ``<!-- end gpu -->``: the workload's size, its newest
run, one row per contestant (its own date and device: rows of one table may come from different sessions),
and the issue's targets as the rows stand. Everything outside the markers is written by hand.
``tests/test_benchmarks.py`` fails when a table is not what this writes; ``python benchmarks/gpu.py --docs``
rewrites them (``--merge`` does too).
"""

from __future__ import annotations

import re
from typing import Any

from gpu_workloads.common import Row, Workload, unfinished_s

BLOCK = re.compile(r"<!-- gpu: (?P<name>[a-z0-9_]+) -->\n.*?<!-- end gpu -->", re.DOTALL)


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table(workload: Workload, results: dict[str, Any]) -> str:
    """The workload's block: what it is, its newest run, its rows, its targets."""
    rows: list[Row] = [r for r in results["rows"] if r["workload"] == workload.name]
    last = results["workloads"].get(workload.name)
    if not rows or last is None:
        return f"`{workload.name}`: {workload.describe(False)}. Not measured on a GPU yet."
    rounds = f", {last['rounds']} round{'s' if last['rounds'] != 1 else ''}" if workload.max_rounds else ""
    device = last["device"] or "a GPU (no contestant finished to name it)"
    head = [f"`{workload.name}`: {last['describe']}. Newest run {last['date'][:10]} on {device} (torch "
            f"{last['torch']}{rounds}{'' if last.get('complete') else ', cut short'}): `{last['command']}`.", ""]
    headers = ["contestant", *(h for h, _ in workload.columns), "date", "device"]
    lines = [_line(headers), "|---|" + "---:|" * len(workload.columns) + "---|---|"]
    for r in rows:
        if "error" in r:
            why = (r["error"].strip().splitlines() or ["?"])[-1][:100].replace("|", "/")
            stopped = unfinished_s(r)
            said = f"not finished in {stopped:.0f} s (stopped)" if stopped else f"failed: {why}"
            lines.append(_line([f"`{r['contestant']}`", said, *[""] * (len(workload.columns) - 1),
                                r["date"][:10], r["device"] or "-"]))
            continue
        lines.append(_line([f"`{r['contestant']}`", *(fn(r, rows) for _, fn in workload.columns), r["date"][:10],
                            r["device"] or "-"]))
    targets = [f"- {t}" for t in workload.targets(rows)]
    return "\n".join(head + lines + ([""] + targets if targets else []))


def render(text: str, results: dict[str, Any], workloads: dict[str, Workload]) -> str:
    """``text`` (docs/gpu.md) with every marked table rewritten; KeyError for a marker naming no workload."""
    return BLOCK.sub(lambda m: f"<!-- gpu: {m['name']} -->\n{table(workloads[m['name']], results)}\n<!-- end gpu -->",
                     text)


def marked(text: str) -> list[str]:
    """The workloads whose tables ``text`` marks, in order."""
    return [m["name"] for m in BLOCK.finditer(text)]
