"""``reliability.on_nonfinite=skip`` under a graph-safe optimizer step (``compile.optimizer=graphed``): the update is
skipped on the device, and the guard reads the record of skipped steps only when a decision is due."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from runner.errors import RunStopped
from runner.figures import counted

log = logging.getLogger(__name__)


class DeviceSkips:
    """The guard's view of the skips a graph-safe optimizer step made on the device."""

    def __init__(self, step: Any, max_skipped_steps: int, ckpt_path: Path) -> None:
        self.step = step  # The stack's ``GraphSafeStep`` (``CompileStack.skip_nonfinite_on_device``).
        self.max_skipped_steps = max_skipped_steps
        self.ckpt_path = ckpt_path
        self._seen = 0  # device skips already logged
        self._before = 0  # steps skipped before this fit (a resumed guard's state)
        self._stopping = False  # saving the last good state: its own on_save_checkpoint reads nothing

    def start(self, global_step: int, skipped_before: int) -> None:
        """At the first training step: the device counts steps from ``global_step``."""
        self.step.count_from(global_step)
        self._before = skipped_before

    def read(self, trainer: Any, skipped: list[int], stop: type[RunStopped]) -> None:
        """Read the device's record (one host read): each newly skipped step (1-based) appended to ``skipped``
        and logged; past ``max_skipped_steps`` the last good state is saved and ``stop`` raised."""
        if self._stopping:
            return
        count, at = self.step.read_skips()
        for i in range(self._seen, count):
            number = at[min(i, len(at) - 1)] + 1
            if self._before + i >= self.max_skipped_steps:
                self._stopping = True
                trainer.save_checkpoint(self.ckpt_path)
                raise stop(
                    f"non-finite gradients at step {number} after skipping {counted(len(skipped), 'step')} "
                    f"({skipped}): each update was skipped on the device, so the weights saved to {self.ckpt_path} "
                    f"(after step {trainer.global_step}) never took one. Fix: lower optimizer.lr or keep "
                    "trainer.gradient_clip_val set, check the data near these steps, then resume with ckpt_path=last "
                    "in the same run dir; or raise reliability.max_skipped_steps.")
            skipped.append(number)
            log.warning("non-finite gradients at step %d: update skipped on the device (%d of at most %d)",
                        number, len(skipped), self.max_skipped_steps)
        self._seen = count
