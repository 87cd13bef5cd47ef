"""``reliability.on_nonfinite=skip`` handed to a graph-safe optimizer step: the update skipped on the device, read
when a decision is due.

Where the stack runs the optimizer step as one graph-safe function (``compile.optimizer=graphed``), the guard does not
read the loss before every update: the step computes ``found_inf`` from the total norm of the gradients (a non-finite
loss gives non-finite gradients; gradients that overflow on a finite loss are skipped too), its fused kernel skips the
update on the device, and the step records which steps it skipped there. The guard reads that record every
``check_every`` optimizer steps (1 on the CPU, the logging interval on a GPU), before each checkpoint and at the end:
it logs each skipped step, counts it in ``reliability/skipped_steps``, and stops the run at the skip past
``max_skipped_steps``. Every skipped update left the weights as they were, so the state it saves then is good; under
DDP the gradients are the same on every rank after their all-reduce, so every rank skips, reads and stops alike.
"""

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
        self.step = step
        """The stack's ``GraphSafeStep`` (``CompileStack.skip_nonfinite_on_device``)."""
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
