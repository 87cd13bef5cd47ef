"""The compile stack: ``CompileStack`` applies every part (one folder each) in one ordered sequence and runs each step
through them; ``stack_of(trainer)`` is how a callback reaches it."""

from runner.stack.compile_stack import CompileStack, stack_of
from runner.stack.optimizer.graphed import gradient_hooks
from runner.stack.settings import CacheArtifacts, CompileSettings, LightningSide
from runner.stack.step_mode import Eager, StepMode

__all__ = ["CacheArtifacts", "CompileSettings", "CompileStack", "Eager", "LightningSide", "StepMode", "gradient_hooks",
           "stack_of"]
