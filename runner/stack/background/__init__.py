"""Compile beside the run (``compile.background``): a second process compiles the step while the first steps
train eagerly, then the run switches. Reached through this package only; imports the spine and ``compiling``.
"""

from runner.stack.background.switch import BackgroundCompile, CompileInRun, build_background

__all__ = ["BackgroundCompile", "CompileInRun", "build_background"]
