"""``StepMode``: the one owner of Dynamo's stance during a fit, asked by every part that wants a step eager."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Any

from runner.torch_internals import runtime


class Eager(Enum):
    """Why a step runs eagerly."""

    beside = "compiling beside the run"
    reverted = "back to eager: the compiled step measured slower"
    warmup = "CUDA-graph warm-up"
    hold = "a size the ranks have not agreed on yet"
    flops = "the FLOP-counting step"
    pair = "the eager side of a speedup pair"


PRECEDENCE = (Eager.beside, Eager.reverted, Eager.warmup, Eager.hold, Eager.flops, Eager.pair)
_UNSET = object()


# Parts that want eager steps, each over its own span: compiling beside the run (every step until the switch, and
# after it once compiled steps measured slower), the CUDA-graph warm-up (the first training steps), shape agreement
# (a step in which this rank saw a size not agreed on), the telemetry's FLOP step and the eager side of its pairs.
# The shape policy wants its after-warm-up stance inside later training steps. None sets a stance: each asks this
# mode, which alone sets Dynamo's, by PRECEDENCE (any eager reason wins, the first one reported; else the shape
# policy's stance inside a training step after its warm-up; else the stance the fit found), and puts it back when
# the fit ends.
class StepMode:
    """Sets Dynamo's stance for every step from the reasons the parts of the fit give (module docstring)."""

    def __init__(self) -> None:
        self.steps = 0
        self.optimizer_steps = 0
        self._held: set[Eager] = set()  # reasons that hold until released (beside, a batch's flops/pair)
        self._this_step: set[Eager] = set()  # reasons for the next training step only (an agreement hold)
        self._eager_first = 0  # the first training steps eager (CUDA-graph warm-up)
        self._after: tuple[str, int] | None = None  # (stance, from which training step) inside training steps
        self._in_step = False
        self._applied: str | None = None  # the stance the mode set (None: the fit's own)
        self._prior: Any = _UNSET  # the stance the fit found, put back at the end

    # -- what the parts ask for -------------------------------------------------------------------
    def hold(self, why: Eager) -> None:
        """Every step eager until :meth:`release` (``beside``: validation too; ``pair``/``flops``: a batch)."""
        self._held.add(why)
        self._apply()

    def release(self, why: Eager) -> None:
        self._held.discard(why)
        self._apply()

    def eager_first_steps(self, steps: int) -> None:
        """The first ``steps`` training steps eager (their optimizer steps are not)."""
        self._eager_first = steps

    def eager_next_step(self, why: Eager) -> None:
        """The coming training step eager (asked while its batch is prepared)."""
        self._this_step.add(why)

    def after_warmup(self, stance: str, from_step: int) -> None:
        """Dynamo's ``stance`` inside every training step once ``from_step`` optimizer steps are done."""
        self._after = (stance, from_step)

    def optimizer_step_done(self) -> None:
        self.optimizer_steps += 1

    # -- the training step ----------------------------------------------------------------------------
    @contextmanager
    def training_step(self) -> Iterator[None]:
        """Around one training step (forward, loss, and backward when the step runs it)."""
        self._in_step = True
        self._apply()
        try:
            yield
        finally:
            self._in_step = False
            self._this_step.clear()
            self.steps += 1
            self._apply()

    # -- questions -------------------------------------------------------------------------------------
    def eager_because(self) -> Eager | None:
        """Why the next training step runs eagerly (None: it runs compiled)."""
        return next((why for why in PRECEDENCE if why in self._reasons(step=True)), None)

    @property
    def eager(self) -> bool:
        """Whether what runs now runs eagerly."""
        return bool(self._reasons(step=self._in_step))

    def _reasons(self, step: bool) -> set[Eager]:
        reasons = set(self._held)
        if step:
            reasons |= self._this_step
            if self.steps < self._eager_first:
                reasons.add(Eager.warmup)
        return reasons

    def _wanted(self) -> str | None:
        if self._reasons(step=self._in_step):
            return "force_eager"
        if self._in_step and self._after is not None and self.optimizer_steps >= self._after[1]:
            return self._after[0]
        return None

    def _apply(self) -> None:
        wanted = self._wanted()
        if wanted == self._applied:
            return
        if self._prior is _UNSET:
            self._prior = runtime.stance_now()
        if wanted is None:
            runtime.restore_stance(self._prior)
        else:
            runtime.set_stance(wanted)
        self._applied = wanted

    def close(self) -> None:
        """The stance the fit found, back (after an exception too); the mode holds nothing any more."""
        self._held.clear()
        self._this_step.clear()
        self._in_step = False
        if self._prior is not _UNSET:
            runtime.restore_stance(self._prior)
        self._applied, self._prior = None, _UNSET
