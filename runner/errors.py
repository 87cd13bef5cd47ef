"""The errors that end a run with a one-paragraph message and a distinct exit code."""

from __future__ import annotations


class RunStopped(RuntimeError):
    """A run stopped for a reason the message explains; ``python -m runner`` prints the message
    (no traceback) and exits with ``exit_code``."""

    exit_code = 1
