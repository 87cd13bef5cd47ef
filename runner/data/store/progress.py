"""Progress of a preparation that takes more than a few seconds: rows done, rows per second, time left."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

Sink = Callable[[str], None]


def console(message: str) -> None:
    """Lightning's rank-zero info logger (what compile progress prints through), else this module's log."""
    try:
        from lightning.pytorch.utilities import rank_zero_info
    except ImportError:  # a worker process, or a minimal install: the log
        log.info(message)
        return
    rank_zero_info(message)


class Progress:
    """``what``: the data and what is done to it (``tokenizing data.path=x.jsonl``); ``total``: rows to do; ``topic``:
    the lines' first word (``data``; ``runner eval``'s ``eval``)."""

    def __init__(self, what: str, total: int, file: Path | None = None, sink: Sink = console,
                 after_s: float = 5.0, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 unit: str = "rows", topic: str = "data") -> None:
        self.what, self.total, self.file, self.sink, self.unit, self.topic = what, total, file, sink, unit, topic
        self.after_s, self.every_s, self.clock = after_s, every_s, clock
        self.done = 0
        self.start = clock()
        self._next_line = self.start + after_s
        self._next_file = self.start
        self.said = False

    def advance(self, rows: int) -> None:
        """``rows`` more are done."""
        self.done += rows
        now = self.clock()
        if now >= self._next_file:
            self._write_file(now)
            self._next_file = now + 1.0
        if now >= self._next_line and self.done < self.total:
            self._say(self.line(now))
            self._next_line = now + self.every_s

    def line(self, now: float) -> str:
        """``data: tokenizing X: 120,000 of 1,000,000 rows (12%), 24,000 rows/s, about 37 s left``."""
        seconds = max(now - self.start, 1e-9)
        rate = self.done / seconds
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        pct = 100 * self.done / max(self.total, 1)
        return (f"{self.topic}: {self.what}: {self.done:,} of {self.total:,} {self.unit} ({pct:.0f}%), {rate:,.0f} "
                f"{self.unit}/s, about {left:.0f} s left")

    def finish(self) -> float:
        """The seconds it took; a last line when anything was said before."""
        seconds = self.clock() - self.start
        if self.said:
            rate = self.done / max(seconds, 1e-9)
            self._say(f"{self.topic}: {self.what}: {self.done:,} {self.unit} in {seconds:.1f} s "
                      f"({rate:,.0f} {self.unit}/s)")
        return seconds

    def _say(self, message: str) -> None:
        self.said = True
        with contextlib.suppress(Exception):  # saying how far it got must never stop the preparation
            self.sink(message)

    def _write_file(self, now: float) -> None:
        if self.file is None:
            return
        with contextlib.suppress(OSError):
            self.file.write_text(json.dumps({"what": self.what, "done": self.done, "total": self.total,
                                             "seconds": round(now - self.start, 1)}))


class Heartbeat:
    """For work that cannot count its rows (``datasets`` converting a file to Arrow, hashing a large file): from
    ``after_s`` on, a line every ``every_s`` seconds saying how long it has run, from a daemon thread, and the total at
    the end when anything was said."""

    def __init__(self, what: str, sink: Sink = console, after_s: float = 5.0, every_s: float = 10.0) -> None:
        self.what, self.sink, self.after_s, self.every_s = what, sink, after_s, every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self.said = False

    def __enter__(self) -> Heartbeat:
        self.start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        if self.said and exc[0] is None:
            self._say(f"data: {self.what}: done in {time.monotonic() - self.start:.1f} s")

    def _beat(self) -> None:
        wait = self.after_s
        while not self._done.wait(wait):
            self._say(f"data: {self.what}: {time.monotonic() - self.start:.0f} s so far")
            wait = self.every_s

    def _say(self, message: str) -> None:
        self.said = True
        with contextlib.suppress(Exception):
            self.sink(message)
