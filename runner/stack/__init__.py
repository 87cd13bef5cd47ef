"""The compile stack. The spine: ``CompileStack`` (``compile_stack``) applies every part in one ordered
sequence, ``parts`` builds them, ``host`` is what configures it and ``component`` the interface each part
implements. The parts, one folder each: ``planning`` (what is compiled and how), ``background`` (compile
beside the run), ``cudagraphs``, ``optimizer``, ``errors`` (errors and demotion), ``offload``, ``dynamic``,
``deferred`` (what the compiled step keeps out of its graph), ``console`` (what it prints), ``caches``.
``runner.strategy`` holds the thin Lightning overrides.
"""

from runner.stack.compile_stack import CompileSettings, CompileStack, Host
from runner.stack.planning.plan import CompilePlan, resolve_plan

__all__ = ["CompilePlan", "CompileSettings", "CompileStack", "Host", "resolve_plan"]
