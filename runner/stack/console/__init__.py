"""What the stack prints: live compile progress, and the one-line summary in a user's own Trainer.
Imports the spine only; ``runner.telemetry`` and ``runner.strategy`` use its progress lines.
"""

from runner.stack.console.progress import CompileProgress, Sink, default_sink
from runner.stack.console.summary import CompileConsole

__all__ = ["CompileConsole", "CompileProgress", "Sink", "default_sink"]
