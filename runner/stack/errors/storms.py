"""Stop paying for a recompile storm early: a frame whose same non-shape guard fails twice is demoted."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from runner.torch_internals import observation
from runner.torch_internals import settings as torch_settings

_NUMBER = re.compile(r"-?\b\d+(?:\.\d+)?(?:e[-+]?\d+)?\b")
_SHAPE = re.compile(r"size mismatch|stride mismatch|storage_offset|\.size\(\)|\.stride\(\)|dim mismatch|"
                    r"\bNe\(|\bEq\(")


@dataclass(frozen=True)
class Storm:
    """A frame that recompiled twice on the same guard."""

    name: str
    filename: str | None
    firstlineno: int | None
    guard: str

    @property
    def frame(self) -> str:
        return f"{self.name} ({self.filename}:{self.firstlineno})"


def guard_text(reason: str | None) -> str:
    """``"0/7: len(self.losses) == 7   # ...user stack"`` -> ``len(self.losses) == 7``."""
    first = (reason or "").strip().splitlines()[0] if reason else ""
    return first.split(":", 1)[-1].split("#", 1)[0].strip()


# Some Python state a step reads cannot become a graph input (a value it branches on, a list that grows, an object
# replaced every step): every step fails the same guard and recompiles until recompile_limit (8 compiles, each paid in
# full). A frame whose same non-shape guard caused a second recompile is a certain storm, reported then, saving the
# remaining six compiles. Shape guards belong to the shape policy, and the two compiles a changing int or float costs
# before it becomes a graph input are not a storm (their guard changes once, then holds). Demoting is the stack's
# decision (CompileStack.demote); this only detects.
class StormWatch:
    """Detects recompile storms from torch's compile records (see the module docstring)."""

    def __init__(self, threshold: float = 2) -> None:
        self.threshold = threshold
        self._graphs = -1
        self._last: object | None = None  # the newest compile record already read (records are not
        # told apart by compile id: ids restart at 0/0 after torch._dynamo.reset())
        self._counts: Counter[tuple[str, str | None, int | None, str]] = Counter()
        self._reported: set[tuple[str, str | None, int | None]] = set()

    def start(self, settings: torch_settings.TorchSettings | None = None) -> None:
        """Ignore everything compiled before now (``settings``: raise torch's record limit, 64, so a
        long fit's records do not roll out between two checks)."""
        if settings is not None:
            settings.compilation_metrics_limit(100_000)
        records = observation.compilation_metrics()
        self._graphs = observation.graphs_compiled()
        self._last = records[-1] if records else None

    def check(self) -> list[Storm]:
        """Storms completed since the last check (nothing, cheaply, when nothing compiled)."""
        graphs = observation.graphs_compiled()
        if graphs == self._graphs:
            return []
        self._graphs = graphs
        storms = []
        records = observation.compilation_metrics()
        seen = next((i for i in range(len(records) - 1, -1, -1) if records[i] is self._last), -1)
        for raw in records[seen + 1:]:
            self._last = raw
            record = observation.to_record(raw)
            if not record.is_forward:
                continue
            guard = guard_text(record.recompile_reason)
            if not guard or _SHAPE.search(guard):  # a guard on tensor sizes: the shape policy's business, not a storm
                continue
            name = observation.resume_parent(record.co_name) or record.co_name or "?"
            frame = (name, record.co_filename, record.co_firstlineno)
            key = (*frame, _NUMBER.sub("#", guard))  # values blanked: x == 7 and x == 8 are one guard failing again
            self._counts[key] += 1
            if self._counts[key] >= self.threshold and frame not in self._reported:
                self._reported.add(frame)
                storms.append(Storm(name, record.co_filename, record.co_firstlineno, guard))
        return storms
