"""The compile stack and the Lightning strategies that apply it."""

from runner.strategy.lightning import CompileStrategy, DDPCompileStrategy
from runner.strategy.stack import CompileSettings, CompileStack

__all__ = ["CompileSettings", "CompileStack", "CompileStrategy", "DDPCompileStrategy"]
