"""``compile.background``'s decisions, pure: where a compile process beside the run can help
(:func:`resolve_background`) and whether switching to its compiled step pays (:func:`switch_pays`,
``auto`` only). ``runner.stack.background`` carries them out."""

from __future__ import annotations

from typing import Any

import torch

from runner.config.schema import Background
from runner.stack.plan import CompilePlan

NOTHING = "nothing is compiled"
SWITCH_MARGIN = 2.0
"""``auto`` switches when the time saved exceeds this many times the switch the compile process measured:
its estimate (the same compile from the warm cache, in a process that has compiled before) came out at
about half the run's own switch (1.0 s against 1.9-2.8 s, the tiny test GPT on a 2-core CPU)."""


def resolve_background(policy: Background, plan: CompilePlan, world_size: int, pulls_batches: bool,
                       device: torch.device) -> tuple[Background, str | None]:
    """The policy this fit runs and, when it compiles in the run although asked otherwise, why."""
    if policy is Background.disabled:
        return policy, None
    if not plan.compiles:
        return Background.disabled, NOTHING
    if world_size > 1:
        return Background.disabled, "several processes train, and every rank would have to switch at the same step"
    if pulls_batches:
        return Background.disabled, "the step pulls its own batches (dataloader_iter): there is no batch to send"
    backend = str(plan.kwargs.get("backend"))
    if policy is Background.auto and backend != "inductor":
        return Background.disabled, f"backend={backend} keeps no on-disk cache a compile process could fill"
    if policy is Background.auto and device.type != "cpu":
        # The process would hold a second model, its optimizer state and a batch's activations on the
        # run's own device, memory the run may need later: only on request (shared, pinned).
        return Background.disabled, (f"on {device.type} a compile process would need memory on the run's device; "
                                     "compile.background=shared opts in")
    return policy, None


def switch_pays(measured: dict[str, Any], eager_ms: float | None, steps_left: float | None) -> tuple[bool, str]:
    """Whether the compiled step saves more over the steps left than loading it costs, and why (``auto``)."""
    speedup, switch_s = measured.get("speedup_x"), measured.get("switch_s")
    if not isinstance(speedup, (int, float)) or not isinstance(switch_s, (int, float)):
        return True, "the compile process measured no speedup"
    if speedup <= 1.0:
        return False, f"its compiled step measured {speedup:.2f}x eager, no faster"
    if steps_left is None or eager_ms is None:
        return True, f"its compiled step measured {speedup:.2f}x eager and the run has no known end"
    saved = steps_left * eager_ms / 1e3 * (1.0 - 1.0 / speedup)
    cost = SWITCH_MARGIN * switch_s
    why = (f"its compiled step measured {speedup:.2f}x eager: over the {steps_left:.0f} steps left it would save "
           f"{saved:.1f} s against up to {cost:.1f} s to compile from the warm cache")
    return saved > cost, why
