"""Compile failures in one paragraph (the failing frame, the reason, the fix), and the watch."""

from __future__ import annotations

import logging
import re
from typing import Any

from runner.config.schema import OnError
from runner.errors import RunStopped
from runner.stack.errors.storms import guard_text
from runner.stack.settings import StackComponent
from runner.torch_internals import errors

log = logging.getLogger(__name__)


class CompileFailure(RunStopped):
    """A compile error under ``compile.on_error=raise``; the message is the one paragraph."""

    exit_code = 3


class _Handler(logging.Handler):
    """Forwards Dynamo's frame-conversion warnings to the watch."""

    def __init__(self, watch: CompileErrorWatch) -> None:
        super().__init__(level=logging.WARNING)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.watch.on_record(record)
        except Exception:  # a logging handler must never break the run it observes
            self.handleError(record)


class CompileErrorWatch(StackComponent):
    """Listens to Dynamo's frame-conversion warnings: recompile-limit hits and eager fallbacks."""

    name = "compile_errors"

    def __init__(self, on_error: Any = OnError["auto"]) -> None:
        self.on_error = on_error
        self.limit_hits: list[dict[str, str]] = []
        self.fallbacks: list[dict[str, str]] = []
        self._handler = _Handler(self)

    def on_record(self, record: logging.LogRecord) -> None:
        """One Dynamo warning: a limit hit or an eager fallback is logged in one line and kept."""
        if (hit := errors.limit_hit_from_record(record)) is not None:
            hit = {"limit": hit["limit"], "function": hit["function"], "guard": guard_text(hit["reason"]) or "unknown"}
            self.limit_hits.append(hit)
            then = ("the run stops (compile.on_error=raise)" if self.on_error is OnError["raise"] else
                    "that frame runs eagerly from now on, as torch.compile does (compile.on_error=raise would stop)")
            log.warning("compile: recompile limit %s hit by %s; the guard that kept failing: %s; %s.",
                        hit["limit"], hit["function"], hit["guard"], then)
        elif (fb := errors.fallback_from_record(record)) is not None:
            self.fallbacks.append(fb)
            log.warning("compile: %s runs eagerly (compile.on_error=eager): %s", fb["function"], fb["reason"])

    def configure(self) -> None:
        """Start listening; under ``on_error=raise`` a recompile-limit hit becomes an error."""
        self.torch_settings.dynamo("fail_on_recompile_limit_hit", self.on_error is OnError["raise"])
        logging.getLogger(errors.CONVERT_FRAME_LOGGER).addHandler(self._handler)

    def teardown(self) -> None:
        logging.getLogger(errors.CONVERT_FRAME_LOGGER).removeHandler(self._handler)
        super().teardown()

    def figures(self) -> dict[str, Any]:
        return {"compile/recompile_limit_hits": list(self.limit_hits)}


# -- the paragraph -----------------------------------------------------------------------------------
def _first_lines(text: str, n: int = 2) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip() and not ln.startswith("Set TORCHDYNAMO")]
    return " ".join(lines[:n])


def explain_compile_error(exc: BaseException, watch: CompileErrorWatch | None = None) -> str | None:
    """One paragraph for a compile error (None when ``exc`` is not one)."""
    kind = errors.compile_error_kind(exc)
    if kind is None:
        return None
    where = errors.frame_of(exc) or (errors.frame_of(exc.__cause__) if exc.__cause__ else None)
    if kind == "recompile_limit":
        hit = watch.limit_hits[-1] if watch and watch.limit_hits else None
        what = (f"recompile limit {hit['limit']} hit by {hit['function']}; the guard that kept failing: "
                f"`{hit['guard']}`" if hit else "recompile limit hit")
        fix = ("make that value stable or dynamic (dynamic=dynamic marks sizes dynamic; a Python number that "
               "changes every step should be a tensor), raise dynamic.recompile_limit, or leave compile.on_error "
               "at auto (the default) to demote that frame and go on")
    elif kind == "fail_on_recompile":
        m = re.search(r"function name: '([^']+)'.*?guard failure\(s\):\s*-\s*(.+?)\n", str(exc), re.S)
        what = (f"recompile after warm-up in '{m[1]}'; failing guard: `{guard_text(m[2]) or 'unknown'}`" if m
                else _first_lines(str(exc)))
        fix = ("use a shape policy that covers the new shapes (dynamic=bucket or dynamic=dynamic), or "
               "dynamic.after_warmup=eager_on_recompile to run new shapes eagerly")
    elif kind == "constraint":
        m = re.search(r"specified range (.+?) satisfy the generated guard (.+?)$", str(exc), re.M)
        what = (f"a dim marked dynamic over `{m[1]}` was specialised by the compiler to `{m[2].strip()}`" if m
                else _first_lines(str(exc)))
        fix = ("mark_dynamic bounds are strict. On CPU, Inductor's C++ float sums guard on their size "
               "(batch x length <= 4096, to choose an accumulation helper), which splits a wide range: use "
               "dynamic=unbacked (no size guards, still one graph), or set dynamic.max (and data.batch_size) "
               "so that batch x max stays on one side of the guard, or dynamic=automatic / bucket, which let "
               "the compiler choose its graphs")
    elif kind == "backend" and "RNG ops in recompute regions" in str(exc):
        what = (f"backend {errors.backend_name(exc)!r} failed: a random op (dropout, or scaled_dot_product_attention, "
                "tagged random even at dropout 0) lies in a checkpointed block of a forward-loss-backward graph "
                "(compile.scope=step_backward), where torch cannot recompute it")
        fix = ("use compile.scope=step with offload=checkpoint (the partitioner handles random ops there), or "
               "offload=checkpoint_budget, bf16 or fp8 with step_backward")
    elif kind == "backend" and "RunAndSaveRngState" in str(exc):
        what = (f"backend {errors.backend_name(exc)!r} failed: a checkpointed block saves and restores the random "
                "state (around dropout or scaled_dot_product_attention), which Inductor's C++ wrapper cannot generate")
        fix = "set ++compile.options.cpp_wrapper=false, or use offload=checkpoint_budget instead of offload=checkpoint"
    elif kind == "backend":
        what = f"backend {errors.backend_name(exc)!r} failed: {_first_lines(str(errors.inner_exception(exc)), 1)}"
        fix = ("try compile.backend=aot_eager to tell a Dynamo/AOTAutograd problem from a backend one, or set "
               "compile.on_error=eager to run this frame eagerly")
    elif kind == "unsupported":
        gb_type = errors.graph_break_type(exc) or "unsupported"
        explanation = re.search(r"Explanation: (.+)", str(exc))
        what = f"graph break '{gb_type}'" + (f": {explanation[1].strip()}" if explanation else "")
        fix = ("set compile.fullgraph=false to let Dynamo split the graph there, move that call out of the "
               "compiled code, or set compile.on_error=eager to run this frame eagerly")
    else:
        what = f"{type(exc).__name__}: {_first_lines(str(exc))}"
        fix = "set compile.on_error=eager to run this frame eagerly, or compile.backend=aot_eager to narrow it down"
    place = f" in {where}" if where else ""
    return f"compile failed{place}: {what}. Fix: {fix}."
