"""The compile trace (``telemetry.trace``): ``trace/*``, torch's structured trace and tlparse's report of it.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

TRACE_HTML = define("trace/html", "tlparse's report of every compile", label="compile report (tlparse)")
TRACE_FILE = define("trace/file", "torch's structured trace, relative to the run directory")
TRACE_STATUS = define("trace/status",
                      "what became of the trace: rendered, nothing was compiled, or why tlparse did not render it")
