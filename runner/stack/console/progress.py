"""Live compile progress: what is being compiled, and for how long, while it compiles."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

Sink = Callable[[str], None]


def default_sink(message: str) -> None:
    """Lightning's rank-zero info logger: prints once per job, not once per rank, and only where
    Lightning's own info lines print (``logging.getLogger("lightning.pytorch")`` at INFO or below)."""
    from lightning.pytorch.utilities import rank_zero_info

    rank_zero_info(message)


def _short(label: str, width: int = 120) -> str:
    """Long file paths make heartbeat lines wrap; keep the tail, which names the file."""
    return label if len(label) <= width else "..." + label[-(width - 3) :]


class CompileProgress:
    """Prints compile start, heartbeat and end lines; see the module docstring."""

    def __init__(self, sink: Sink = default_sink, interval_s: float = 5.0) -> None:
        """``interval_s``: seconds between heartbeat lines for a compile that is still running."""
        self.sink = sink
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._running: dict[int, tuple[str, float]] = {}  # token -> (label, start)
        self._next = 0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def _say(self, message: str) -> None:
        # Printing must never break a compile (closed stream, torn-down progress bar).
        with contextlib.suppress(Exception):
            self.sink(message)

    # -- CompileListener -----------------------------------------------------------------------
    def compile_started(self, label: str, kind: str) -> None:
        """Print the start line and make sure the heartbeat thread is running."""
        verb = {"compile": "compiling", "recompile": "recompiling", "backward": "compiling",
                "cudagraph_recording": "recording a CUDA graph of"}.get(kind, kind)
        self._say(f"{verb} {_short(label)} ...")
        with self._lock:
            self._running[self._next] = (label, time.perf_counter())
            self._next += 1
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(target=self._heartbeat, name="compile-progress", daemon=True)
                self._thread.start()

    def compile_finished(self, label: str, kind: str, seconds: float) -> None:
        """Print the end line with the compile's duration."""
        with self._lock:
            token = next((t for t, (name, _) in self._running.items() if name == label), None)
            if token is not None:
                del self._running[token]
        verb = "recorded a CUDA graph of" if kind == "cudagraph_recording" else "compiled"
        self._say(f"{verb} {_short(label)} in {seconds:.1f} s")

    # -- heartbeat -------------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        # A daemon thread: it never keeps the process alive, and it exits when nothing compiles,
        # so an idle run has no extra thread. The compiling thread releases the GIL often enough
        # (every few ms) for this to print on time.
        while not self._closed:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            with self._lock:
                running = list(self._running.values())
                if not running:
                    self._thread = None
                    return
            now = time.perf_counter()
            for label, started in running:
                self._say(f"  still compiling {_short(label, 80)}: {now - started:.0f} s")

    def close(self) -> None:
        """Stop the heartbeat thread (compiles still open are forgotten)."""
        with self._lock:
            self._closed = True
            self._running.clear()
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=2 * self.interval_s)
