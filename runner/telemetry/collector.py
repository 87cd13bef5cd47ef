"""``CompileCollector``: what torch.compile did since ``start()``, from torch's own records (compile metrics,
counters, compile start/end callbacks, the graph-break log).

``compile/recompiles`` counts compiles caused by a guard failure of an earlier compile of the same user frame;
a continuation (``torch_dynamo_resume_in_f_at_N``) recompiling with its parent is folded into the parent's and
counted only in ``compile/frame_recompiles``. ``compile/graph_breaks`` counts distinct sites (reason + file:line)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.stack.optimizer.step import in_runners_optimizer_step
from runner.telemetry.advice import (
    UNKNOWN_BATCHES,
    Batches,
    graph_break_fix,
    guard_location,
    recompile_fix,
    runners_site,
)
from runner.torch_internals import observation, settings

METRICS_LIMIT = 100_000  # Compile records torch keeps, at least (its default, 64, loses records in long runs).
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


def recompile_events(forward: list[observation.CompileRecord]) -> list[dict[str, Any]]:
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
        parent = observation.resume_parent(r.co_name)
        if parent is not None and frame_recompiles[(r.co_filename, parent)] > folded[key]:
            folded[key] += 1
            continue
        events.append({"name": r.co_name, "location": f"{r.co_filename}:{r.co_firstlineno}",
                       "compile_id": r.compile_id, "reason": r.recompile_reason})
    return events


class CompileListener(Protocol):
    """Told when a compile starts and ends (e.g. the live progress printer)."""

    def compile_started(self, label: str, kind: str) -> None: ...

    def compile_finished(self, label: str, kind: str, seconds: float) -> None: ...


@dataclass
class _Open:
    label: str
    kind: str
    step: int | None
    started: float = field(default_factory=time.perf_counter)


class CompileCollector:
    """Collects compile figures between :meth:`start` (registers torch callbacks and a log handler) and
    :meth:`stop`; set :attr:`step` so events carry the step they happened in."""

    def __init__(self, listeners: tuple[CompileListener, ...] = (), batches: Batches = UNKNOWN_BATCHES) -> None:
        """``batches``: what the run's batches are, for the fix of a recompile of a new shape."""
        self.listeners = listeners
        self.batches = batches
        self.step: int | None = None
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], _Open] = {}
        self._names: dict[str, str] = {}  # compile_id -> label, so the backward compile is named too
        self._baseline_records: list[Any] = []
        self._baseline_counters: dict[str, dict[str, int]] = {}
        self._handler: GraphBreakHandler | None = None
        self._undo = contextlib.ExitStack()  # what start() changed, put back by stop()
        self._final: list[observation.CompileRecord] | None = None
        self._final_counters: dict[str, dict[str, int]] | None = None
        self._live: tuple[int, list[int]] = (-1, [])  # (records + graphs when counted, live guard counts)
        self._settings = settings.TorchSettings()  # the compile-record limit

    def start(self) -> CompileCollector:
        """Begin collecting: everything compiled before this call is excluded."""
        self._settings.compilation_metrics_limit(METRICS_LIMIT)
        self._undo.callback(self._settings.restore)
        # Holding the old records keeps them alive, so their ids cannot be reused by new ones.
        self._baseline_records = observation.compilation_metrics()
        self._baseline_counters = observation.counters_snapshot()
        self._final = self._final_counters = None
        self._live = (-1, [])
        logger = observation.graph_break_logger()
        self._handler = GraphBreakHandler()
        self._undo.callback(setattr, logger, "propagate", logger.propagate)
        self._undo.callback(logger.setLevel, logger.level)
        self._undo.callback(logger.removeHandler, self._handler)
        if not logger.isEnabledFor(logging.DEBUG):
            # The user did not ask for graph-break logs: capture them without echoing to stderr.
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
        logger.addHandler(self._handler)
        self._undo.callback(observation.COMPILE_EVENT_SOURCE.subscribe(self._on_start, self._on_end))
        return self

    def stop(self) -> None:
        """Stop collecting; the figures stay readable and frozen at this point."""
        self._final, self._final_counters = self._records(), self._counter_delta()
        self._undo.close()

    def __enter__(self) -> CompileCollector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- compile callbacks (run inside torch's compile; must be cheap and never raise) ---------
    def _on_start(self, trigger: str, compile_id: str) -> None:
        kind = {"DYNAMO": "compile", "LAZY_BACKWARD": "backward"}.get(trigger, trigger.lower())
        if kind == "compile":
            target = observation.compiling_target()
            label = f"{target[0]} ({short_path(target[1])}:{target[2]})" if target else compile_id
            self._names[compile_id] = label
            if not compile_id.endswith("/0"):
                kind = "recompile"
        else:
            label = f"{self._names.get(compile_id, compile_id)} [{kind}]"
        with self._lock:
            self._open[(trigger, compile_id)] = _Open(label, kind, self.step)
        for listener in self.listeners:
            listener.compile_started(label, kind)

    def _on_end(self, trigger: str, compile_id: str) -> None:
        with self._lock:
            job = self._open.pop((trigger, compile_id), None)
        if job is None:
            return
        seconds = time.perf_counter() - job.started
        self.events.append({"kind": job.kind, "name": job.label, "compile_id": compile_id, "step": job.step,
                            "duration_s": seconds})
        for listener in self.listeners:
            listener.compile_finished(job.label, job.kind, seconds)

    def compiling(self) -> list[tuple[str, float]]:
        now = time.perf_counter()
        with self._lock:
            return [(job.label, now - job.started) for job in self._open.values()]

    def _records(self) -> list[observation.CompileRecord]:
        if self._final is not None:
            return self._final
        seen = {id(m) for m in self._baseline_records}
        return [observation.to_record(m) for m in observation.compilation_metrics() if id(m) not in seen]

    def _counter_delta(self) -> dict[str, dict[str, int]]:
        if self._final_counters is not None:
            return self._final_counters
        now, base = observation.counters_snapshot(), self._baseline_counters
        # torch never decreases counters; max(0, .) guards against someone clearing them mid-run.
        return {g: {k: max(0, v - base.get(g, {}).get(k, 0)) for k, v in values.items()} for g, values in now.items()}

    def _live_guards(self, compiles: int) -> list[int]:
        """Live guard counts, recounted when ``compiles`` (records + graphs so far) has changed."""
        # Walking every cache entry's guard tree costs ~0.5 ms; the entries change only when
        # something compiles, and figures are read every logging interval.
        if self._live[0] != compiles:
            self._live = (compiles, [n for entries in observation.live_guard_counts().values() for n in entries])
        return self._live[1]

    def figures(self) -> dict[str, Any]:
        records = self._records()
        counters = self._counter_delta()
        forward = [r for r in records if r.is_forward]
        backward = [r for r in records if not r.is_forward]
        guards = [r.guard_count for r in forward if r.guard_count is not None]
        live = self._live_guards(len(records) + observation.counter(counters, "unique_graphs"))
        hit = observation.counter(counters, "fx_cache_hit") + observation.counter(counters, "aot_cache_hit")
        miss = observation.counter(counters, "fx_cache_miss") + observation.counter(counters, "aot_cache_miss")
        recompiles = [{**e, "fix": recompile_fix(str(e["reason"]), guard_location(str(e["reason"])), self.batches)}
                      for e in recompile_events(forward)]
        # The step a recompile happened in is its forward compile's. Other events share the compile
        # id (the lazy backward, a CUDA-graph recording of that graph, both later) and must not
        # overwrite it.
        steps = {e["compile_id"]: e["step"] for e in self.events if e["kind"] in ("compile", "recompile")}
        for event in recompiles:
            event["step"] = steps.get(event["compile_id"])
        breaks = self.graph_breaks(counters)
        fallbacks = observation.counter(counters, "frames_total") - observation.counter(counters, "frames_ok")
        recordings = [e["duration_s"] for e in self.events if e["kind"] == "cudagraph_recording"]
        return {
            "compile/frames": len({(r.co_filename, r.co_name, r.co_firstlineno) for r in forward}),
            "compile/frame_compiles": len(forward),
            "compile/graphs": observation.counter(counters, "unique_graphs"),
            "compile/recompiles": len(recompiles),
            "compile/frame_recompiles": sum(1 for r in forward if r.recompile_reason and not r.fail_type),
            "compile/graph_breaks": len(breaks),
            "compile/graph_break_hits": sum(b["count"] for b in breaks),
            "compile/guards_total": sum(guards),
            "compile/guards_max": max(guards, default=0),
            "compile/live_guards_total": sum(live),
            "compile/live_guards_max": max(live, default=0),
            "compile/time_s": sum(r.total_s for r in records),
            "compile/dynamo_s": sum(r.total_s - r.backend_s for r in forward),
            "compile/aot_autograd_s": sum(r.backend_s - r.inductor_s for r in forward)
            + sum(r.total_s - r.inductor_s for r in backward),
            "compile/inductor_s": sum(r.inductor_s for r in records),
            "compile/backward_s": sum(r.total_s for r in backward),
            # A CUDA-graph recording runs the graph, it does not compile it: its wall time is apart.
            "compile/wall_s": sum(e["duration_s"] for e in self.events if e["kind"] != "cudagraph_recording"),
            "compile/cudagraph_recording_s": sum(recordings),
            "compile/cache_hits": hit,
            "compile/cache_misses": miss,
            "compile/cudagraph_skips": observation.counter(counters, "cudagraph_skips"),
            "compile/cudagraph_recordings": len(recordings),
            "compile/fallbacks": max(0, fallbacks),
            "compile/recompile_reasons": recompiles,
            "compile/graph_break_reasons": breaks,
            "compile/fallback_reasons": [self._fallback(r) for r in forward if r.fail_type],
            "compile/events": list(self.events),
        }

    def _fallback(self, r: observation.CompileRecord) -> dict[str, Any]:
        """A failed compile (the frame ran eagerly): its frame, torch's reason, the guard that failed."""
        frame = r.compile_id.split("/")[0]
        name = r.co_name or next((v for k, v in self._names.items() if k.split("/")[0] == frame), None)
        reason = f"{r.fail_type}: {short_reason(r.fail_reason or '')}"
        if r.recompile_reason:
            reason += f" (recompiling after: {r.recompile_reason})"
        return {"name": name or r.compile_id, "compile_id": r.compile_id, "reason": reason}

    def graph_breaks(self, counters: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
        """Distinct graph-break sites: reason, user file:line (from the log) and hits."""
        sites = self._handler.sites if self._handler is not None else Counter()
        if sites:
            return [{"reason": r, "user_frame": loc, "count": n, "fix": graph_break_fix(r, loc)}
                    for (r, loc), n in sites.items()]
        # No log records (e.g. the logger was reconfigured): reasons from the counters, no location.
        return [{"reason": short_reason(reason), "user_frame": None, "count": n, "fix": graph_break_fix(reason)}
                for reason, n in observation.graph_break_counts(counters).items() if n > 0]
