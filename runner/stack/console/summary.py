"""What a user of ``CompileStrategy`` in their own Trainer sees: what compiles, for how long, and a one-line summary at
the end of fit (runner's own runs print a full table instead: ``runner.telemetry``)."""

from __future__ import annotations

import logging
import time

from runner.stack.console.progress import CompileProgress, Sink, default_sink
from runner.stack.settings import StackComponent
from runner.torch_internals import observation

_KIND = {"LAZY_BACKWARD": "backward", "CUDAGRAPH_RECORDING": "cudagraph_recording"}


class CompileConsole(StackComponent):
    """Compile progress lines while compiling, and the end-of-fit summary line."""

    name = "console"

    def __init__(self, sink: Sink = default_sink, heartbeat_s: float = 5.0) -> None:
        self.sink = sink
        self.progress = CompileProgress(self.say, interval_s=heartbeat_s)
        self.compiles = 0
        self.recompiles = 0
        self.seconds = 0.0
        self._labels: dict[str, str] = {}  # compile id -> label
        self._seen: set[str] = set()
        self._open: dict[str, tuple[str, str, float]] = {}
        self._breaks_before = 0

    def say(self, message: str) -> None:
        """One line through the sink (progress, a demotion, the summary), where Lightning prints its info lines."""
        if logging.getLogger("lightning.pytorch").isEnabledFor(logging.INFO):  # the user's verbosity switch
            self.sink(message)

    def configure(self) -> None:
        self._breaks_before = self._graph_breaks()
        self.listen(self._on_start, self._on_end)

    @staticmethod
    def _graph_breaks() -> int:
        return sum(observation.graph_break_counts(observation.counters_snapshot()).values())

    def _on_start(self, trigger: str, compile_id: str) -> None:
        target = observation.compiling_target()
        label = self._labels.get(compile_id.split("/")[0]) if trigger == "LAZY_BACKWARD" else None
        if label is None:
            label = f"{target[0]} ({_short_file(target[1])}:{target[2]})" if target else compile_id
            self._labels[compile_id.split("/")[0]] = label
        kind = _KIND.get(trigger, "recompile" if label in self._seen and trigger == "DYNAMO" else "compile")
        if trigger == "DYNAMO":
            self.compiles += 1
            self.recompiles += label in self._seen
            self._seen.add(label)
        self._open[compile_id + trigger] = (label, kind, time.perf_counter())
        self.progress.compile_started(label + (" [backward]" if kind == "backward" else ""), kind)

    def _on_end(self, trigger: str, compile_id: str) -> None:
        opened = self._open.pop(compile_id + trigger, None)
        if opened is None:
            return
        label, kind, started = opened
        seconds = time.perf_counter() - started
        self.seconds += seconds
        self.progress.compile_finished(label + (" [backward]" if kind == "backward" else ""), kind, seconds)

    def summary(self, extra: str = "") -> str:
        """One line: what compiling did in this fit."""
        breaks = self._graph_breaks() - self._breaks_before
        if self.compiles == 0:
            return "runner: nothing was compiled in this fit" + (f" ({extra})" if extra else "")
        text = (f"runner: {self.compiles} compile{'s' * (self.compiles != 1)} ({self.recompiles} recompile"
                f"{'s' * (self.recompiles != 1)}), {breaks} graph break{'s' * (breaks != 1)}, "
                f"{self.seconds:.1f} s compiling")
        return text + (f"; {extra}" if extra else "")

    def teardown(self) -> None:
        self.progress.close()
        super().teardown()


def _short_file(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])
