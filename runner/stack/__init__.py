"""The compile stack. The spine: ``CompileStack`` (``compile_stack``) applies every part in one ordered
sequence, ``demotion`` says what a frame in a recompile storm runs as instead, ``fit_parts`` builds one fit's parts
(and their per-step hooks), ``fit_inputs`` holds what configures the stack (``CompileSettings``)
and what Lightning hands it (``LightningSide``), ``component`` the interface each part implements, and
``step_mode`` the one owner of Dynamo's stance, which every part asks for eager steps. The parts, one folder
each: ``compiling`` (what is compiled and how, and applying it), ``background`` (compile beside the run),
``cudagraphs``, ``optimizer``, ``errors`` (compile errors and recompile storms), ``offload``, ``dynamic``,
``deferred`` (what the compiled step keeps out of its graph), ``console`` (what it prints), ``caches``.
``runner.strategy`` holds the thin Lightning overrides. ``stack_of(trainer)`` is how a callback reaches it.
"""

from runner.stack.compile_stack import CompileSettings, CompileStack, LightningSide, stack_of
from runner.stack.compiling.plan import CompilePlan, resolve_plan
from runner.stack.fit_inputs import CacheArtifacts
from runner.stack.optimizer.graphed import gradient_hooks
from runner.stack.step_mode import Eager, StepMode

__all__ = ["CacheArtifacts", "CompilePlan", "CompileSettings", "CompileStack", "Eager", "LightningSide", "StepMode",
           "gradient_hooks", "resolve_plan", "stack_of"]
