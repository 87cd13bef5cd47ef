"""``telemetry.trace=true``: torch's structured compile trace in ``<run_dir>/trace/``, rendered by tlparse (when
installed) into ``<run_dir>/tlparse/index.html``. runner parses nothing of the trace itself."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner.torch_internals import observation

log = logging.getLogger(__name__)


def render(trace_file: Path, out_dir: Path, timeout_s: float = 300.0) -> tuple[Path | None, str]:
    """Run tlparse on ``trace_file`` into ``out_dir``; (index.html or None, what happened)."""
    beside = Path(sys.executable).with_name("tlparse")  # an environment's bin/, else PATH
    exe = str(beside) if beside.is_file() else shutil.which("tlparse")
    if exe is None:
        return None, "tlparse is not installed (pip install 'runner[trace]'); the raw trace is kept"
    proc = subprocess.run([exe, str(trace_file), "-o", str(out_dir), "--overwrite", "--no-browser"],
                          capture_output=True, text=True, timeout=timeout_s)
    index = out_dir / "index.html"
    if proc.returncode != 0 or not index.is_file():
        return None, f"tlparse failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-300:]}"
    return index, "rendered"


class StructuredTrace:
    """Traces compiles into ``<run_dir>/trace`` between :meth:`start` and :meth:`stop`; ``stop`` renders
    tlparse's report. A no-op object when tracing is off (``enabled=False``)."""

    def __init__(self, run_dir: Path | None, enabled: bool) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.enabled = enabled and self.run_dir is not None
        self._stop: Any = None
        self._figures: dict[str, Any] = {}

    def start(self) -> None:
        if not self.enabled or self._stop is not None or self.run_dir is None:
            return
        trace_dir = self.run_dir / "trace"
        trace_dir.mkdir(parents=True, exist_ok=True)
        self._stop = observation.start_structured_trace(str(trace_dir))

    def stop(self) -> None:
        """Detach (restoring torch's trace logger) and render the HTML report; idempotent."""
        if self._stop is None or self.run_dir is None:
            return
        stop, self._stop = self._stop, None
        trace_file = stop()
        if trace_file is None:
            self._figures = {"trace/status": "nothing was compiled: no trace"}
            return
        html, status = render(Path(trace_file), self.run_dir / "tlparse")
        self._figures = {"trace/file": str(Path(trace_file).relative_to(self.run_dir)), "trace/status": status}
        if html is not None:
            self._figures["trace/html"] = str(html.relative_to(self.run_dir))
        else:
            log.warning("telemetry.trace: %s", status)

    def figures(self) -> dict[str, Any]:
        """``trace/file``, ``trace/html`` (paths relative to the run dir) and ``trace/status``."""
        return dict(self._figures)
