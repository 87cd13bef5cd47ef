"""Recompile events and graph-break sites with their user file:line, as small pure functions."""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from typing import Any

from runner import torch_internals as ti
from runner.stack.optimizer.step import in_runners_optimizer_step
from runner.telemetry.advice import runners_site

_LOCATION_RE = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\s*$", re.MULTILINE)


class GraphBreakHandler(logging.Handler):
    """Collects (short reason, user file:line) of each graph break Dynamo logs; a break in torch's optimizer
    code while runner's compiled optimizer step is traced is labelled runner's (:func:`runners_site`)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.sites: Counter[tuple[str, str]] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a malformed record must never break a training step
            return
        match = _LOCATION_RE.search(text.split("\n", 1)[0])
        location = f"{match['file']}:{match['line']}" if match else ""
        if match and in_runners_optimizer_step(match["file"]):
            location = runners_site(location)
        self.sites[(short_reason(text.partition("Graph Break Reason:")[2]), location)] += 1


def short_path(path: str) -> str:
    """A path for humans: from the package root for installed code, else relative to the cwd."""
    head, sep, tail = path.rpartition("site-packages" + os.sep)
    if sep:
        return tail
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith("..") else rel


def short_reason(text: str) -> str:
    """The first informative line of a graph-break reason (torch prefixes a generic one)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith("Encountered graph break when attempting")]
    return (useful or lines or ["unknown"])[0]


def recompile_events(forward: list[ti.CompileRecord]) -> list[dict[str, Any]]:
    """Recompiles of user frames, each continuation's recompiles folded into its parent's (up to as many as the
    parent had; any extra one is its own guard's and counts)."""
    frame_recompiles: Counter[tuple[str | None, str | None]] = Counter()
    folded: Counter[tuple[str | None, str | None]] = Counter()
    events: list[dict[str, Any]] = []
    for r in forward:
        if not r.recompile_reason or r.fail_type:  # a failed recompile is an eager fallback
            continue
        key = (r.co_filename, r.co_name)
        frame_recompiles[key] += 1
        parent = ti.resume_parent(r.co_name)
        if parent is not None and frame_recompiles[(r.co_filename, parent)] > folded[key]:
            folded[key] += 1
            continue
        events.append(
            {
                "name": r.co_name,
                "location": f"{r.co_filename}:{r.co_firstlineno}",
                "compile_id": r.compile_id,
                "reason": r.recompile_reason,
            }
        )
    return events
