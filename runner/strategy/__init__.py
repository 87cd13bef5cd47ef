"""The Lightning strategies that apply the compile stack (``runner.stack``) to any LightningModule."""

from runner.strategy.lightning import CompileStrategy, DDPCompileStrategy

__all__ = ["CompileStrategy", "DDPCompileStrategy"]
