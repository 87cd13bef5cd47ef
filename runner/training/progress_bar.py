"""The training progress bar: Lightning's rich bar, labelled correctly for step- or time-bounded runs."""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar


class RunProgressBar(RichProgressBar):
    """``RichProgressBar`` without the ``Epoch 0/-2`` label.

    runner bounds training by ``max_steps``/``max_time``, so Lightning sets ``max_epochs=-1``
    (unbounded) and its bar prints ``max_epochs - 1`` as the last epoch. Here an unbounded run's
    label is just ``Epoch N``; the bar's counter already shows steps done out of ``max_steps``.
    """

    def _get_train_description(self, current_epoch: int) -> str:
        text = super()._get_train_description(current_epoch)
        max_epochs = self.trainer.max_epochs
        if max_epochs is not None and max_epochs < 0:
            text = text.replace(f"/{max_epochs - 1}", "", 1)
        return text
