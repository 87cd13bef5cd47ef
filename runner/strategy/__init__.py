"""The Lightning strategies that apply the compile stack (``runner.stack``) to any LightningModule."""

from runner.strategy.consolidate import ConsolidatedCheckpoint, full_state_dict
from runner.strategy.fsdp import FSDPCompileStrategy
from runner.strategy.lightning import CompileStrategy, DDPCompileStrategy

__all__ = ["CompileStrategy", "ConsolidatedCheckpoint", "DDPCompileStrategy", "FSDPCompileStrategy", "full_state_dict"]
