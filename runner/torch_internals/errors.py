"""Compile errors as torch raises and logs them: kind, frame, backend, recompile-limit hits and eager fallbacks."""

from __future__ import annotations

import logging
import re

from runner.torch_internals.observation import compilation_metrics

# The prefix of the RuntimeError torch raises under set_stance("fail_on_recompile") (torch/_dynamo/eval_frame.py).
FAIL_ON_RECOMPILE_PREFIX = "Detected recompile when torch.compile stance is 'fail_on_recompile'"
CONVERT_FRAME_LOGGER = "torch._dynamo.convert_frame"  # Dynamo warns there when it gives up on a frame


def is_fail_on_recompile(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's refusal to recompile under the ``fail_on_recompile`` stance."""
    return isinstance(exc, RuntimeError) and str(exc).startswith(FAIL_ON_RECOMPILE_PREFIX)


def compile_error_kind(exc: BaseException) -> str | None:
    """What kind of compile error ``exc`` is (``recompile_limit``, ``backend``...); None when it is none."""
    from torch._dynamo import exc as exc_mod
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    kinds = ((exc_mod.FailOnRecompileLimitHit, "recompile_limit"), (ConstraintViolationError, "constraint"),
             (exc_mod.BackendCompilerFailed, "backend"), (exc_mod.Unsupported, "unsupported"),
             (exc_mod.TorchDynamoException, "dynamo"))  # the first that fits: the most specific first
    if (kind := next((k for cls, k in kinds if isinstance(exc, cls)), None)) is not None:
        return kind
    if isinstance(exc, RuntimeError) and "torch.compile stance is 'fail_on_recompile'" in str(exc):
        return "fail_on_recompile"
    return None


def backend_name(exc: BaseException) -> str:
    """The backend a ``BackendCompilerFailed`` names."""
    return str(getattr(exc, "backend_name", "?"))


def inner_exception(exc: BaseException) -> BaseException:
    """The backend's own exception inside a ``BackendCompilerFailed``."""
    inner = getattr(exc, "inner_exception", None)
    return inner if isinstance(inner, BaseException) else exc


def graph_break_type(exc: BaseException) -> str | None:
    """The graph-break type torch gives an ``Unsupported`` error (``gb_type``)."""
    return getattr(exc, "gb_type", None)


def limit_hit_from_record(record: logging.LogRecord) -> dict[str, str] | None:
    """``torch._dynamo hit config.recompile_limit`` warning -> {limit, function, reason}."""
    if not str(record.msg).startswith("torch._dynamo hit config.") or len(record.args or ()) < 4:
        return None
    limit_type, limit, function, reason = tuple(record.args)[:4]  # type: ignore[arg-type]
    return {"limit": f"{limit_type}={limit}", "function": str(function), "reason": str(reason)}


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
        for m in reversed(compilation_metrics()):
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
