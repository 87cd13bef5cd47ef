"""Learning-rate schedules built from config (``_partial_``: the optimizer comes later)."""

from __future__ import annotations

import logging
import math
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from runner.config.schema.targets import OnResume

log = logging.getLogger(__name__)


class WarmupCosine:
    """The factor of the peak rate at each step: linear warm-up over ``warmup_steps``, then cosine decay to
    ``min_lr_ratio`` at ``total_steps``. ``knots`` (``[step, planned step]`` pairs, from stretches at resume)
    map a step onto the plan piecewise linearly; the last knot runs to ``end_step``, where the plan ends."""

    def __init__(self, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1,
                 on_resume: OnResume | str = OnResume.keep) -> None:
        self.warmup_steps, self.total_steps, self.min_lr_ratio = warmup_steps, total_steps, min_lr_ratio
        self.end_step: float = total_steps
        self.knots: list[list[float]] = []
        # A value, not the enum: LambdaLR saves this object's attributes in the checkpoint (plain values only).
        self.on_resume = OnResume(on_resume).value
        self.note: str | None = None

    def planned(self, step: float) -> float:
        """The plan's factor at (a possibly fractional) ``step`` of the plan."""
        if step < self.warmup_steps:
            return (step + 1) / max(1, self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    def plan_step(self, step: float) -> float:
        """Where ``step`` falls in the plan: itself, unless a stretch at resume moved the rest of it."""
        start = (0.0, 0.0)
        for knot in self.knots:
            if step <= knot[0]:
                return _lerp(step, start, (knot[0], knot[1]))
            start = (knot[0], knot[1])
        if not self.knots:
            return step
        return min(float(self.total_steps), _lerp(step, start, (self.end_step, float(self.total_steps))))

    def __call__(self, step: int) -> float:
        return self.planned(self.plan_step(step))

    def resumed(self, max_steps: int, at_step: int, on_resume: str) -> None:
        """After the checkpoint's plan came back: a resume asks for ``max_steps`` at ``at_step``. A plan for
        other steps is kept or stretched as ``on_resume`` says, with a warning and a note for the summary."""
        self.on_resume = on_resume
        end = round(self.end_step)
        if max_steps == end:
            return
        head = (f"resumed at step {at_step} with trainer.max_steps={max_steps}, but the learning-rate schedule was "
                f"planned to end at step {end}")
        where = self.plan_step(at_step)
        if on_resume == OnResume.stretch.value and where < self.total_steps and max_steps > at_step:
            self.knots.append([float(at_step), where])
            self.end_step = float(max_steps)
            self.note = f"stretch: from step {at_step}, to end at {max_steps} instead of {end}"
            tail = (f"scheduler.on_resume=stretch: the rest of it is stretched from step {at_step} to end at step "
                    f"{max_steps} (the rate goes on from where it was, no jump).")
        elif on_resume == OnResume.stretch.value:
            self.note = f"keep: the schedule had ended at step {end}; nothing left to stretch"
            tail = ("scheduler.on_resume=stretch, but the plan had already reached its final rate: nothing is left "
                    "to stretch, so every further step holds it (min_lr_ratio of the peak). To train on with a new "
                    "warm-up and decay, start a new run.")
        else:
            self.note = f"keep: planned for {end} steps, trainer.max_steps={max_steps}"
            past = (f"steps {end} to {max_steps - 1} hold its final rate (min_lr_ratio of the peak)"
                    if max_steps > end else f"it stops at step {max_steps}, before its rate reaches the floor")
            other = (f"scheduler.on_resume=stretch stretches the rest of it from step {at_step} to end at step "
                     f"{max_steps}" if where < self.total_steps else "the plan has ended, so there is nothing left for "
                     "scheduler.on_resume=stretch to stretch (a fresh warm-up and decay is a new run)")
            tail = f"scheduler.on_resume=keep (the default) keeps that plan, so {past}; {other}."
        log.warning("%s. %s", head, tail)


def _lerp(x: float, a: tuple[float, float], b: tuple[float, float]) -> float:
    return a[1] if b[0] == a[0] else a[1] + (x - a[0]) * (b[1] - a[1]) / (b[0] - a[0])


class ScheduleLR(LambdaLR):
    """``LambdaLR`` over one plan (:class:`WarmupCosine`) that applies ``scheduler.on_resume`` when a
    checkpoint restores the plan, and reports what it did (``figures``, read by the run's summary)."""

    @property
    def plan(self) -> WarmupCosine:
        plan = self.lr_lambdas[0]
        assert isinstance(plan, WarmupCosine)
        return plan

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        configured, on_resume = self.plan.total_steps, self.plan.on_resume
        saved = state_dict.get("lr_lambdas") or [None]
        super().load_state_dict(state_dict)  # the plan's attributes as the checkpoint saved them
        if saved[0] is not None:  # a checkpoint from before plans were saved holds none: it follows max_steps
            self.plan.resumed(configured, self.last_epoch, on_resume)

    def figures(self) -> dict[str, Any]:
        """``run/lr_schedule`` when a resume found the plan for other steps than ``trainer.max_steps``."""
        return {"run/lr_schedule": self.plan.note} if self.plan.note else {}


def warmup_cosine(optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1,
                  on_resume: OnResume | str = OnResume.keep) -> ScheduleLR:
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``min_lr_ratio`` of the peak at
    ``total_steps``; ``on_resume``: what a resume with another ``total_steps`` does (module docstring).
    Works with a tensor learning rate (the scheduler fills it in place)."""
    return ScheduleLR(optimizer, WarmupCosine(warmup_steps, total_steps, min_lr_ratio, on_resume))
