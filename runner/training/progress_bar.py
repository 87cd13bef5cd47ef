"""The training progress bar: Lightning's rich bar, counting what a runner run is bounded by."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import RichProgressBar


class RunProgressBar(RichProgressBar):
    """``RichProgressBar`` that counts optimizer steps out of ``max_steps`` in a step-bounded run."""

    SHOWN = ("train/loss",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown: dict[str, float] = {}
        self._shown_at: int | None = None

    def _steps_bound(self) -> bool:
        trainer = self.trainer
        return trainer.max_epochs is not None and trainer.max_epochs < 0 and (trainer.max_steps or 0) > 0

    @property
    def total_train_batches(self) -> int | float:
        """``max_steps`` in a step-bounded run; else Lightning's batches per epoch."""
        return self.trainer.max_steps if self._steps_bound() else super().total_train_batches

    def _get_train_description(self, current_epoch: int) -> str:
        text = super()._get_train_description(current_epoch)
        max_epochs = self.trainer.max_epochs
        if max_epochs is not None and max_epochs < 0:
            text = text.replace(f"/{max_epochs - 1}", "", 1)
        return text

    def _update(self, progress_bar_id: Any, current: int, visible: bool = True, hard: bool = False) -> None:
        # Lightning moves the training bar to ``batch_idx + 1`` after each batch; a step-bounded run's
        # bar shows the global step instead (overriding the one place that sets the count, so the bar
        # is drawn once per batch, as in Lightning).
        if progress_bar_id is not None and progress_bar_id == self.train_progress_bar_id and self._steps_bound():
            current = self.trainer.global_step
        super()._update(progress_bar_id, current, visible, hard)

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        """Lightning's bar metrics without ``v_num``, and the ``SHOWN`` values as of the last log step."""
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        step = trainer.global_step
        if step != self._shown_at and step % max(1, getattr(trainer, "log_every_n_steps", 1)) == 0:
            self._shown_at = step
            metrics = trainer.callback_metrics
            for key in self.SHOWN:
                if (value := metrics.get(key)) is not None:
                    self._shown[key] = float(value)
        return {**self._shown, **items}
