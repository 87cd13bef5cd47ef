"""Where the stack's console lines print in a Trainer: around Lightning's progress bar, on rank 0."""

from __future__ import annotations

import sys

import lightning.pytorch as pl

from runner.stack.console import Sink, default_sink


def progress_sink(trainer: pl.Trainer) -> Sink:
    """Print around the active progress bar, on rank 0 only."""
    if not trainer.is_global_zero:
        return lambda message: None

    def sink(message: str) -> None:
        from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

        bar = trainer.progress_bar_callback
        progress = getattr(bar, "progress", None) if isinstance(bar, RichProgressBar) else None
        if progress is not None:
            progress.console.print(message, markup=False, highlight=False, soft_wrap=True)
        elif isinstance(bar, TQDMProgressBar):
            from tqdm import tqdm

            tqdm.write(message, file=sys.stderr)  # redraws the bar below the line
        else:
            default_sink(message)

    return sink
