"""The compile stack: ``CompileStack`` applies every part (one folder each) in one ordered sequence and runs each step
through them; ``stack_of(trainer)`` is how a callback reaches it."""

from runner.stack.compile_stack import CompileSettings, CompileStack, LightningSide, stack_of
from runner.stack.compiling.plan import CompilePlan, resolve_plan
from runner.stack.optimizer.graphed import gradient_hooks
from runner.stack.settings import CacheArtifacts
from runner.stack.step_mode import Eager, StepMode

__all__ = ["CacheArtifacts", "CompilePlan", "CompileSettings", "CompileStack", "Eager", "LightningSide", "StepMode",
           "gradient_hooks", "resolve_plan", "stack_of"]
