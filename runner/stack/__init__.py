"""The compile stack, bottom-up: the component interface, the plan (every ``compile.scope``
decision), the transforms (``dynamic/`` shape policies, ``offload/`` saved-activation strategies,
compilation, the optimizer step, CUDA graphs), compile-error explanation, and ``CompileStack``,
which applies them in one ordered sequence. ``runner.strategy`` holds the thin Lightning overrides.
"""

from runner.stack.compile_stack import CompileSettings, CompileStack, Host
from runner.stack.plan import CompilePlan, resolve_plan

__all__ = ["CompilePlan", "CompileSettings", "CompileStack", "Host", "resolve_plan"]
