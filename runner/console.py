"""A clean console for ``runner``: known third-party noise is silenced, narrowly.

Each entry names the exact message and the module that emits it, so anything else those libraries
say (a real warning, a new deprecation) still reaches the user. Only the ``runner`` entry point
calls :func:`quiet_third_party`; importing runner as a library changes nothing.
"""

from __future__ import annotations

import logging
import warnings

# (message regex, module regex) of Python warnings to drop.
_WARNINGS: tuple[tuple[str, str], ...] = (
    # torch 2.13 deprecates LeafSpec; Lightning 2.6 still builds one on every batch it moves.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"lightning\.pytorch\.utilities\._pytree"),
)

# (logger, message prefix) of log records to drop.
_LOG_RECORDS: tuple[tuple[str, str], ...] = (
    # An advertisement printed by every Trainer without a LitLogger.
    ("lightning.pytorch.utilities.rank_zero", "💡 Tip: For seamless cloud logging"),
    ("lightning.pytorch.utilities.rank_zero", "💡 Tip: For seamless cloud uploads"),
    # Printed on every machine without a TPU (the GPU line stays: it says whether a GPU is used).
    ("lightning.pytorch.utilities.rank_zero", "TPU available: False"),
    # runner passes its own model summary (no "Total FLOPs: 0"); Lightning says it skips its default.
    ("lightning.pytorch.utilities.rank_zero", "Trainer already configured with model summary callbacks"),
)


class _DropPrefixes(logging.Filter):
    """Drops records whose message starts with one of ``prefixes``."""

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


def quiet_third_party() -> None:
    """Install the filters above (idempotent)."""
    for message, module in _WARNINGS:
        warnings.filterwarnings("ignore", message=message, module=module)
    by_logger: dict[str, tuple[str, ...]] = {}
    for name, prefix in _LOG_RECORDS:
        by_logger[name] = (*by_logger.get(name, ()), prefix)
    for name, prefixes in by_logger.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropPrefixes) for f in logger.filters):
            logger.addFilter(_DropPrefixes(prefixes))
