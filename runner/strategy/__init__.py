"""The Lightning strategies that apply the compile stack (``runner.stack``) to any LightningModule: one device and
DDP (``lightning``), FSDP2 (``fsdp``). Beside them: one plain state dict from a sharded model (``consolidate``),
``self.log`` without Lightning's per-call metric walk while they run (``log_fastpath``), and where the stack's
console lines print in a Trainer (``progress_sink``)."""

from runner.strategy.consolidate import ConsolidatedCheckpoint, full_state_dict
from runner.strategy.fsdp import FSDPCompileStrategy
from runner.strategy.lightning import CompileStrategy, DDPCompileStrategy

__all__ = ["CompileStrategy", "ConsolidatedCheckpoint", "DDPCompileStrategy", "FSDPCompileStrategy", "full_state_dict"]
