"""Compile beside the run (``compile.background``): a second process compiles the step while the first steps
train eagerly, then the run switches. Reached through this package only; imports the spine and ``compiling``.
"""

from runner.stack.background.run_side import BackgroundCompile, NoBackground, build_background

__all__ = ["BackgroundCompile", "NoBackground", "build_background"]
