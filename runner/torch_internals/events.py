"""Compile events as they happen: torch's compile start/end callbacks, registered once for every listener of
runner (``COMPILE_EVENT_SOURCE``), and what Dynamo is compiling at that moment (``compiling_target``)."""

from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

CompileCallback = Callable[[str, str], None]
"""Called with (trigger, compile_id); trigger is "DYNAMO", "LAZY_BACKWARD", "CUDAGRAPH_RECORDING"..."""


class CompileEvents:
    """The one source of compile events in the process: torch's compile start/end callbacks
    (``torch._dynamo.callback_handler``, which also fire for the deferred backward compile and for each CUDA-graph
    recording) registered once while anyone listens, and passed to every listener of runner as
    ``(trigger name, compile id)``. torch runs them only for the outermost of nested compiles."""

    def __init__(self) -> None:
        self._listeners: list[tuple[CompileCallback, CompileCallback]] = []

    def subscribe(self, on_start: CompileCallback, on_end: CompileCallback | None = None) -> Callable[[], None]:
        """Call ``on_start`` (and ``on_end``) around every compile from now on; returns the unsubscribe."""
        listener = (on_start, on_end or _ignore)
        self._listeners.append(listener)
        self._register()
        return lambda: self._unsubscribe(listener)

    def _register(self) -> None:
        # Again when torch._dynamo.reset() cleared torch's callbacks since the last subscription.
        handler = torch._dynamo.callback_handler
        if self._start not in handler.start_callbacks:
            handler.register_start_callback(self._start)
        if self._end not in handler.end_callbacks:
            handler.register_end_callback(self._end)

    def _unsubscribe(self, listener: tuple[CompileCallback, CompileCallback]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)
        if not self._listeners:
            handler = torch._dynamo.callback_handler
            for remover, fn in ((handler.remove_start_callback, self._start), (handler.remove_end_callback, self._end)):
                with contextlib.suppress(ValueError):  # torch._dynamo.reset() already cleared the registry
                    remover(fn)

    def _start(self, args: Any) -> None:
        for on_start, _ in list(self._listeners):
            on_start(args.callback_trigger.name, str(args.compile_id))

    def _end(self, args: Any) -> None:
        for _, on_end in list(self._listeners):
            on_end(args.callback_trigger.name, str(args.compile_id))

    @property
    def listeners(self) -> int:
        return len(self._listeners)


def _ignore(trigger: str, compile_id: str) -> None:
    """A listener's end callback when it wants only starts."""


COMPILE_EVENT_SOURCE = CompileEvents()
"""The process's compile-event source (the telemetry, CUDA graphs, the shape policy and the console subscribe)."""


def compiling_target() -> tuple[str, str, int] | None:
    """(name, file, first line) of what Dynamo is compiling now, from inside a compile start callback.

    torch passes only a compile id to callbacks; the code object is an argument of
    ``convert_frame._compile``, found by walking the stack. For a compiled ``nn.Module`` Dynamo
    compiles torch's own ``wrap_inline`` wrapper, so the wrapped module (its closure cell ``fn``) is
    named instead: ``Sequential.forward (models.py:12)``. None when called anywhere else.
    """
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and not (
        frame.f_code.co_name == "_compile" and isinstance(frame.f_locals.get("code"), types.CodeType)
    ):
        frame = frame.f_back
    if frame is None:
        return None
    code: types.CodeType = frame.f_locals["code"]
    closure = frame.f_locals.get("closure")
    if code.co_filename.startswith(_TORCH_DIR) and closure and "fn" in code.co_freevars:
        try:
            fn = closure[code.co_freevars.index("fn")].cell_contents
            target = fn.forward if isinstance(fn, torch.nn.Module) else fn
            inner = getattr(getattr(target, "__func__", target), "__code__", None)
            if inner is not None:
                owner = f"{type(fn).__name__}." if isinstance(fn, torch.nn.Module) else ""
                return f"{owner}{inner.co_name}", inner.co_filename, inner.co_firstlineno
        except (ValueError, IndexError, AttributeError):  # an empty cell or an unusual wrapper
            pass
    return code.co_name, code.co_filename, code.co_firstlineno


_TORCH_DIR = os.path.dirname(torch.__file__)


CUDAGRAPH_RECORDING_TRIGGER = "CUDAGRAPH_RECORDING"
"""The compile-callback trigger torch reports while a CUDA graph is recorded (``CallbackTrigger``)."""
