"""What runner compiles and how: ``compile/*`` figures of the plan (scope, target, backend, options), the
Python state it makes dynamic, and the optimizer step.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

COMPILE_SCOPE = define("compile/scope", "what torch.compile wraps: step, blocks, model (none: eager)",
                       label="compile scope")
COMPILE_TARGET = define("compile/target",
                        "what the compiled callable is: nothing, submodules, blocks, step or step_and_backward")
COMPILE_BACKEND = define("compile/backend", "torch.compile's backend (compile.backend)")
COMPILE_MODE = define("compile/mode", "torch.compile's mode (null: its default)")
COMPILE_OPTIONS = define("compile/options", "options passed to torch.compile, runner's defaults included",
                         label="  Inductor options")
COMPILE_COMPILED_AUTOGRAD = define("compile/compiled_autograd",
                                   "whether compiled autograd captures the whole backward (compile.compiled_autograd)")
COMPILE_MODULES_COMPILED = define("compile/modules_compiled", "modules compiled in place over the fit")
COMPILE_DYNAMIC_STATE_SOURCES = define("compile/dynamic_state_sources",
                                       "Lightning's step-time Python state (fit-loop counters, batch_idx) passed to "
                                       "the graph as dynamic inputs: Dynamo's source patterns")
COMPILE_OPTIMIZER = define("compile/optimizer", "how the optimizer step runs (fused kernel, compiled, as given)",
                           label="optimizer step")
COMPILE_OPTIMIZER_REASON = define("compile/optimizer_reason",
                                  "why the optimizer step runs as it does: how many of its steps ran eagerly, or when "
                                  "it was demoted")
COMPILE_OPTIMIZER_EAGER = define("compile/optimizer_eager",
                                 "optimizers kept eager under compile.optimizer=compiled, each with why (its step "
                                 "needs its closure, or is the user's own)")
COMPILE_OPTIMIZER_COMPILED_STEPS = define("compile/optimizer_compiled_steps",
                                          "optimizer steps that ran the compiled step",
                                          label="optimizer steps compiled")
COMPILE_OPTIMIZER_EAGER_STEPS = define("compile/optimizer_eager_steps",
                                       "optimizer steps that ran eagerly (forced-eager steps: warm-up, the speedup "
                                       "pairs' eager side)",
                                       label="optimizer steps eager")
