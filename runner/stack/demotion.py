"""What the stack does with a recompile storm (``runner.stack.errors.storms`` finds it): the frame that storms
stops recompiling and runs in a cheaper form for the rest of the fit.

- the compiled training step itself: the step runs eagerly and compiles the modules it calls instead;
- a module compiled in place: it runs eagerly again;
- the compiled optimizer step: it runs eagerly (``OptimizerStep.demote``);
- any other frame: Dynamo skips it from now on (undone at teardown).

Each demotion is one entry of ``compile/demoted`` and one warning that names the guard and the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning as L

from runner import torch_internals as ti
from runner.stack.compiling.binding import code_of, user_step
from runner.stack.compiling.compile import CompiledModules, compiled_submodules
from runner.stack.errors.storms import Storm
from runner.stack.fit_parts import FitParts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Demotion:
    """What one demotion did: its ``compile/demoted`` entry, the step to call from now on (None: the same step),
    and what puts a skipped frame back at teardown (None: nothing to undo)."""

    entry: dict[str, Any]
    step: Callable[..., Any] | None = None
    undo: Callable[[], None] | None = None


def demote(storm: Storm, module: L.LightningModule, parts: FitParts, compiled: CompiledModules, steps: int,
           whole_step: bool) -> Demotion:
    """Stop recompiling ``storm``'s frame (see the module docstring); ``whole_step``: the training step is compiled
    whole (its Python side effects deferred), ``steps``: optimizer steps so far."""
    own = code_of(user_step(module))
    to, step, undo = "eager", None, None
    if own is not None and (storm.name, storm.firstlineno) == (own.co_name, own.co_firstlineno) and whole_step:
        step, to = user_step(module), "compiled submodules"
        for m in compiled_submodules(module):
            compiled.compile(m, parts.plan.kwargs)
    elif (modules := [m for m in compiled.modules if type(m).forward.__code__.co_name == storm.name
                      and type(m).forward.__code__.co_firstlineno == storm.firstlineno]):
        compiled.restore(modules)
    elif storm.name == "step" and parts.optimizer_step is not None and parts.optimizer_step._prior:
        parts.optimizer_step.demote(steps)
    elif (code := ti.find_code(storm.filename, storm.firstlineno, storm.name)) is not None:
        undo = ti.run_code_eagerly(code)
    message = (f"compile: {storm.frame} recompiled twice on the same guard `{storm.guard}`; runner stops "
               f"recompiling it at step {steps} and runs it as {to} (reported as compile/demoted). "
               "Make that value stable, a tensor, or read it outside the step to keep it compiled.")
    log.warning(message)
    if parts.console is not None:
        parts.console.say(message)
    entry = {"frame": storm.frame, "guard": storm.guard, "step": steps, "to": to}
    return Demotion(entry, step, undo)
