"""Compile beside the run (``compile.background``): a second process compiles the step while the first steps
train eagerly, then the run switches. Reached through this package only; imports the spine and ``compiling``.
"""

from runner.stack.background.build import build_background
from runner.stack.background.policy import DeviceRoom, NoBackground, room_for_process
from runner.stack.background.run_side import BackgroundCompile

__all__ = ["BackgroundCompile", "DeviceRoom", "NoBackground", "build_background", "room_for_process"]
