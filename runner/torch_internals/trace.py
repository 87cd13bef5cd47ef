"""torch's structured compile trace (what ``TORCH_TRACE`` writes, tlparse's input), started mid-process."""

from __future__ import annotations

import logging
from collections.abc import Callable


def _interned(text: str, index: int) -> Callable[[], tuple[str, int]]:
    return lambda: (text, index)


def start_structured_trace(directory: str) -> Callable[[], str | None]:
    """Write torch's structured compile trace (what ``TORCH_TRACE=<dir>`` writes, tlparse's input) into
    ``directory`` from now on; returns ``stop``, which detaches it, puts the trace logger back as found
    and returns the trace file's path (None when nothing was compiled, so nothing was written).

    ``TORCH_TRACE`` is read once, when torch is imported; a run that starts tracing later attaches
    torch's own lazy trace handler to torch's trace logger (``torch._logging._internal.trace_log``)."""
    from torch._logging import _internal as logs

    trace_log = logs.trace_log
    handler = logs.LazyTraceHandler(directory)
    handler.setFormatter(logs.TorchLogsFormatter(trace=True))
    prior_level, prior_propagate = trace_log.level, trace_log.propagate
    trace_log.setLevel(logging.DEBUG)
    trace_log.propagate = False
    trace_log.addHandler(handler)
    # torch writes each source file name into the trace once per process (an interned "str" record); a
    # trace started after earlier compiles (a tune's trials, a sweep in one process) would lack them and
    # tlparse would show "(unknown)" files: replay the table into the new trace (the same ids).
    from torch._logging import structured

    for text, index in list(structured.INTERN_TABLE.items()):
        logs.trace_structured("str", _interned(text, index), suppress_context=True)

    def stop() -> str | None:
        # torch 2.13+ keeps the path in _stream_path; torch 2.11 has only the open file's name.
        path = getattr(handler, "_stream_path", None) or getattr(handler.stream, "name", None)
        trace_log.removeHandler(handler)
        handler.close()
        trace_log.setLevel(prior_level)
        trace_log.propagate = prior_propagate
        return path

    return stop
