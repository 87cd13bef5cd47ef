"""The compile stack: ``CompileStack`` (``compile_stack``) applies every part in one ordered sequence and runs each
step through them; ``settings`` holds what configures it and what Lightning hands it; ``step_mode`` owns Dynamo's
stance. The parts, one folder each: ``compiling``, ``background``, ``cudagraphs``, ``optimizer``, ``errors``,
``offload``, ``dynamic``, ``console``, ``caches``. ``stack_of(trainer)`` is how a callback reaches it.
"""

from runner.stack.compile_stack import CompileSettings, CompileStack, LightningSide, stack_of
from runner.stack.compiling.plan import CompilePlan, resolve_plan
from runner.stack.optimizer.graphed import gradient_hooks
from runner.stack.settings import CacheArtifacts
from runner.stack.step_mode import Eager, StepMode

__all__ = ["CacheArtifacts", "CompilePlan", "CompileSettings", "CompileStack", "Eager", "LightningSide", "StepMode",
           "gradient_hooks", "resolve_plan", "stack_of"]
