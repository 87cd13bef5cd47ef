"""Compile failures in one paragraph: the failing frame, the reason, the fix.

``compile.on_error=raise`` stops the run with ``CompileFailure`` (the paragraph); ``eager`` lets
Dynamo run a failing frame eagerly (``suppress_errors``, set by the compile stack), and
``CompileErrorWatch`` logs one line per fallback (telemetry counts ``compile/fallbacks`` and their
reasons). A recompile-limit hit is reported with the guard that kept failing in both modes: under
``raise`` it stops the run (``fail_on_recompile_limit_hit``), under ``eager`` it is logged.

torch internals used here (the exception attributes ``gb_type``, ``innermost_user_frame_summary``,
``compile_id``; the ``torch._dynamo.convert_frame`` warning's arguments) are read by one function
each, pinned by tests/test_reliability_units.py.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

from runner.config.schema import OnError
from runner.reliability.errors import RunStopped

log = logging.getLogger(__name__)

_CONVERT_FRAME_LOGGER = "torch._dynamo.convert_frame"


class CompileFailure(RunStopped):
    """A compile error under ``compile.on_error=raise``; the message is the one paragraph."""

    exit_code = 3


# -- torch internals, one function each ----------------------------------------------------------
def limit_hit_from_record(record: logging.LogRecord) -> dict[str, str] | None:
    """``torch._dynamo hit config.recompile_limit`` warning -> {limit, function, guard}."""
    if not str(record.msg).startswith("torch._dynamo hit config.") or len(record.args or ()) < 4:
        return None
    limit_type, limit, function, reason = tuple(record.args)[:4]  # type: ignore[arg-type]
    return {"limit": f"{limit_type}={limit}", "function": str(function), "guard": _guard_text(str(reason))}


def fallback_from_record(record: logging.LogRecord) -> dict[str, str] | None:
    """Dynamo's ``WON'T CONVERT <fn> <file> line <n> due to: ...`` warning (suppress_errors)."""
    text = record.getMessage()
    m = re.match(r"WON'T CONVERT (\S+) (\S+) line (\d+)", text)
    if m is None:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Unsupported|Failed)\b.*:", ln)]
    reason = errors[-1] if errors else lines[-1]
    return {"function": f"'{m[1]}' ({m[2]}:{m[3]})", "reason": reason[:300]}


def frame_of(exc: BaseException) -> str | None:
    """The frame torch was compiling (name, file:line) and the user line that failed, if known."""
    code = None
    compile_id = str(getattr(exc, "compile_id", "") or "")
    if compile_id:
        for m in reversed(torch._dynamo.utils.get_compilation_metrics()):
            if str(getattr(m, "compile_id", "")) == compile_id:
                code = f"'{m.co_name}' ({m.co_filename}:{m.co_firstlineno})"
                break
    user = getattr(exc, "innermost_user_frame_summary", None)
    if user is None and getattr(exc, "real_stack", None):
        user = exc.real_stack[-1]  # type: ignore[attr-defined]
    at = f"{user.filename}:{user.lineno} in {user.name}" + (f" `{user.line.strip()}`" if user.line else "") \
        if user is not None else None
    if code and at:
        return f"frame {code}, at {at}"
    return f"frame {code}" if code else (f"at {at}" if at else None)


def _guard_text(reason: str) -> str:
    # "0/1: n == 1    # def g(x, n): ...  # file:17 in g" -> "n == 1"
    return reason.split(":", 1)[-1].split("#", 1)[0].strip() if reason else "unknown"


# -- the watch -------------------------------------------------------------------------------------
class CompileErrorWatch(logging.Handler):
    """Listens to Dynamo's frame-conversion warnings: recompile-limit hits and eager fallbacks."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.limit_hits: list[dict[str, str]] = []
        self.fallbacks: list[dict[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if (hit := limit_hit_from_record(record)) is not None:
                self.limit_hits.append(hit)
                log.warning("compile: recompile limit %s hit by %s; the guard that kept failing: %s. "
                            "That frame now runs eagerly.", hit["limit"], hit["function"], hit["guard"])
            elif (fb := fallback_from_record(record)) is not None:
                self.fallbacks.append(fb)
                log.warning("compile: %s runs eagerly (compile.on_error=eager): %s", fb["function"], fb["reason"])
        except Exception:  # a logging handler must never break the run it observes
            self.handleError(record)

    def attach(self, on_error: Any) -> None:
        """Start listening; under ``on_error=raise`` a recompile-limit hit becomes an error."""
        torch._dynamo.config.fail_on_recompile_limit_hit = on_error is OnError["raise"]
        logging.getLogger(_CONVERT_FRAME_LOGGER).addHandler(self)

    def detach(self) -> None:
        logging.getLogger(_CONVERT_FRAME_LOGGER).removeHandler(self)

    def figures(self) -> dict[str, Any]:
        return {"compile/recompile_limit_hits": list(self.limit_hits)}


# -- the paragraph -----------------------------------------------------------------------------------
def _first_lines(text: str, n: int = 2) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip() and not ln.startswith("Set TORCHDYNAMO")]
    return " ".join(lines[:n])


def _is_compile_error(exc: BaseException) -> bool:
    exc_mod = torch._dynamo.exc
    if isinstance(exc, (exc_mod.TorchDynamoException, exc_mod.FailOnRecompileLimitHit, ConstraintViolationError)):
        return True
    return isinstance(exc, RuntimeError) and "torch.compile stance is 'fail_on_recompile'" in str(exc)


def explain_compile_error(exc: BaseException, watch: CompileErrorWatch | None = None) -> str | None:
    """One paragraph for a compile error (None when ``exc`` is not one)."""
    if not _is_compile_error(exc):
        return None
    exc_mod = torch._dynamo.exc
    where = frame_of(exc) or (frame_of(exc.__cause__) if exc.__cause__ else None)
    if isinstance(exc, exc_mod.FailOnRecompileLimitHit):
        hit = watch.limit_hits[-1] if watch and watch.limit_hits else None
        what = (f"recompile limit {hit['limit']} hit by {hit['function']}; the guard that kept failing: "
                f"`{hit['guard']}`" if hit else "recompile limit hit")
        fix = ("make that value stable or dynamic (dynamic=dynamic marks sizes dynamic; a Python number that "
               "changes every step should be a tensor), raise dynamic.recompile_limit, or set "
               "compile.on_error=eager to run that frame eagerly after the limit")
    elif isinstance(exc, RuntimeError) and "fail_on_recompile" in str(exc) and not isinstance(
            exc, exc_mod.TorchDynamoException):
        m = re.search(r"function name: '([^']+)'.*?guard failure\(s\):\s*-\s*(.+?)\n", str(exc), re.S)
        what = (f"recompile after warm-up in '{m[1]}'; failing guard: `{_guard_text(m[2])}`" if m
                else _first_lines(str(exc)))
        fix = ("use a shape policy that covers the new shapes (dynamic=bucket or dynamic=dynamic), or "
               "dynamic.after_warmup=eager_on_recompile to run new shapes eagerly")
    elif isinstance(exc, ConstraintViolationError):
        m = re.search(r"specified range (.+?) satisfy the generated guard (.+?)$", str(exc), re.M)
        what = (f"a dim marked dynamic over `{m[1]}` was specialised by the compiler to `{m[2].strip()}`" if m
                else _first_lines(str(exc)))
        fix = ("mark_dynamic bounds are strict. On CPU, Inductor's C++ float sums guard on their size "
               "(batch x length <= 4096, to choose an accumulation helper), which splits a wide range: use "
               "dynamic=unbacked (no size guards, still one graph), or set dynamic.max (and data.batch_size) "
               "so that batch x max stays on one side of the guard, or dynamic=automatic / bucket, which let "
               "the compiler choose its graphs")
    elif isinstance(exc, exc_mod.BackendCompilerFailed):
        what = f"backend {exc.backend_name!r} failed: {_first_lines(str(getattr(exc, 'inner_exception', exc)), 1)}"
        fix = ("try compile.backend=aot_eager to tell a Dynamo/AOTAutograd problem from a backend one, or set "
               "compile.on_error=eager to run this frame eagerly")
    elif isinstance(exc, exc_mod.Unsupported):
        gb_type = getattr(exc, "gb_type", None) or "unsupported"
        explanation = re.search(r"Explanation: (.+)", str(exc))
        what = f"graph break '{gb_type}'" + (f": {explanation[1].strip()}" if explanation else "")
        fix = ("set compile.fullgraph=false to let Dynamo split the graph there, move that call out of the "
               "compiled code, or set compile.on_error=eager to run this frame eagerly")
    else:
        what = f"{type(exc).__name__}: {_first_lines(str(exc))}"
        fix = "set compile.on_error=eager to run this frame eagerly, or compile.backend=aot_eager to narrow it down"
    place = f" in {where}" if where else ""
    return f"compile failed{place}: {what}. Fix: {fix}."
