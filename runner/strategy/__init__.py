"""The Lightning strategies that apply the compile stack (``runner.stack``): one device and DDP (``lightning``),
FSDP2 (``fsdp``); one plain state dict from a sharded model (``consolidate``), and where the stack's console lines
print in a Trainer (``progress_sink``)."""

from runner.strategy.consolidate import ConsolidatedCheckpoint
from runner.strategy.fsdp import FSDPCompileStrategy
from runner.strategy.lightning import CompileStrategy, DDPCompileStrategy

__all__ = ["CompileStrategy", "ConsolidatedCheckpoint", "DDPCompileStrategy", "FSDPCompileStrategy"]
