"""A clean console for ``runner``'s own runs: known third-party noise silenced by exact message and module; only the
entry point enters these, and they restore what they changed."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from runner import lightning_internals as li

# (message regex, module regex) of Python warnings to drop.
_WARNINGS: tuple[tuple[str, str], ...] = (
    # torch 2.13 deprecates LeafSpec; Lightning 2.6 still builds one on every batch it moves.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"lightning\.pytorch\.utilities\._pytree"),
    # runner sets log_every_n_steps itself and bounds runs by steps: logging goes on across epochs,
    # so "smaller than the logging interval" (an epoch shorter than the interval) loses nothing.
    (r"The number of training batches \(\d+\) is smaller than the logging interval",
     r"lightning\.pytorch\.loops\.fit_loop"),
)

# logger -> message prefixes of log records to drop.
_LOG_RECORDS: dict[str, tuple[str, ...]] = {"lightning.pytorch.utilities.rank_zero": (
    # An advertisement printed by every Trainer without a LitLogger.
    "💡 Tip: For seamless cloud logging", "💡 Tip: For seamless cloud uploads",
    # Printed on every machine without a TPU (the GPU line stays: it says whether a GPU is used).
    "TPU available: False",
    # runner passes its own model summary (no "Total FLOPs: 0"); Lightning says it skips its default.
    "Trainer already configured with model summary callbacks",
)}


def _drop(prefixes: tuple[str, ...]) -> Callable[[logging.LogRecord], bool]:
    return lambda record: not record.getMessage().startswith(prefixes)


@contextmanager
def quiet_third_party() -> Iterator[None]:
    """While open: the warnings and log records above are dropped; on exit the filters are as they were."""
    added = [(logging.getLogger(name), _drop(prefixes)) for name, prefixes in _LOG_RECORDS.items()]
    with warnings.catch_warnings():
        for message, module in _WARNINGS:
            warnings.filterwarnings("ignore", message=message, module=module)
        for logger, drop in added:
            logger.addFilter(drop)
        try:
            yield
        finally:
            for logger, drop in added:
                logger.removeFilter(drop)


class _FirstLine(logging.Formatter):
    """Formats a record as ``inner`` does, with only the first line of runner's INFO messages (the rest: log file)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.levelno == logging.INFO and record.name.startswith("runner.") and "\n" in message:
            record = logging.makeLogRecord({**record.__dict__, "msg": message.split("\n", 1)[0], "args": None})
        return self.inner.format(record)


@contextmanager
def short_console_lines() -> Iterator[None]:
    """While open: the root logger's console handlers print the first line of runner's INFO messages."""
    swapped = [(h, h.formatter) for h in logging.getLogger().handlers
               if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]
    for handler, formatter in swapped:
        handler.setFormatter(_FirstLine(formatter or logging.Formatter()))
    try:
        yield
    finally:
        for handler, formatter in swapped:
            handler.setFormatter(formatter)


def quiet_wandb(logger: Any) -> None:
    """Quiet a ``WandbLogger`` runner built (no end-of-run history and summary, no ``anonymous=None`` that wandb 0.22+
    warns about); settings the user gave stay."""
    init = li.wandb_init_kwargs(logger)
    if init is None:
        return
    if "anonymous" in init and init["anonymous"] is None:
        del init["anonymous"]
    init.setdefault("settings", {"quiet": True})


@contextmanager
def quiet_transformers_bars() -> Iterator[None]:
    """While open, transformers draws no progress bars (a tiny model's export is over before they mean anything)."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        yield
        return
    from transformers.utils import logging as tlog

    enabled = tlog.is_progress_bar_enabled()
    tlog.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            tlog.enable_progress_bar()
