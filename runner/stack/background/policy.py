"""``compile.background``'s decisions, pure (where a compile process helps, whether it fits, whether switching pays),
and the two small pieces they pick between: :class:`NoBackground` and :class:`LateStep`."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from runner.config.decisions import gpu_defaults
from runner.config.schema import Background
from runner.stack.compiling.compile import CompiledModules, apply_compile
from runner.stack.compiling.plan import CompilePlan
from runner.stack.settings import StackComponent

Step = Callable[..., Any]

NOTHING = "nothing is compiled"
DECIDE_AFTER = 3
LONG_RUN_S = 300.0
PROCESS_FACTOR = 2.0
PROCESS_OVERHEAD_BYTES = 1 << 30
RUN_HEADROOM = 0.10
SWITCH_MARGIN = 2.0

SETTLE_STEPS = 2
CHECK_STEPS = 8
REVERT_AT = 1.25


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
    if policy is Background.auto and device.type == "cuda" and not gpu_defaults.BACKGROUND_AUTO_ON_CUDA:
        return Background.disabled, ("on cuda the GPU rows measured compiling beside the run finishing later than "
                                     "compiling in it (runner.config.decisions.gpu_defaults); "
                                     "compile.background=shared opts in")
    if policy is Background.auto and device.type not in ("cpu", "cuda"):
        # No way to ask this device how much memory a second model, its optimizer state and a batch's
        # activations would leave the run: only on request (shared, pinned).
        return Background.disabled, (f"on {device.type} runner cannot tell whether a compile process would fit in "
                                     "the device's memory; compile.background=shared opts in")
    return policy, None


@dataclass(frozen=True)
class DeviceRoom:
    """What ``auto`` on a CUDA device decides from, read after the run's first (eager) optimizer step."""

    free_bytes: int
    total_bytes: int
    step_peak_bytes: int


def room_for_process(room: DeviceRoom) -> tuple[bool, str]:
    """``auto`` on a CUDA device: whether a compile process fits beside the run, and the numbers it decided on."""
    gib = 2**30
    # The process holds PROCESS_FACTOR times the run step's peak (Inductor's benchmarking and autotuning buffers, a
    # caching allocator of its own) plus its CUDA context; the run keeps RUN_HEADROOM for batches longer than its first.
    need = PROCESS_FACTOR * room.step_peak_bytes + PROCESS_OVERHEAD_BYTES
    keep = RUN_HEADROOM * room.total_bytes
    said = (f"{room.free_bytes / gib:.1f} of {room.total_bytes / gib:.1f} GiB free; a compile process needs about "
            f"{need / gib:.1f} GiB ({PROCESS_FACTOR:g} x the step's peak of {room.step_peak_bytes / gib:.1f} GiB, plus "
            f"{PROCESS_OVERHEAD_BYTES / gib:g} GiB) and the run keeps {keep / gib:.1f} GiB")
    return room.free_bytes >= need + keep, said


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


FREE_CORE = 0.75
SAMPLE_S = 0.25


def idle_cores(cpus: set[int], seconds: float = SAMPLE_S) -> float | None:
    """How many of ``cpus`` sat idle over the next ``seconds`` (from /proc/stat; None where it cannot be read)."""
    def sample() -> dict[int, tuple[int, int]]:
        out = {}
        with open("/proc/stat") as f:
            for line in f:
                name, *fields = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                    ticks = [int(x) for x in fields[:8]]
                    out[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))  # idle + iowait, all
        return out

    try:
        before = sample()
        time.sleep(seconds)
        after = sample()
    except (OSError, ValueError):
        return None
    idle = sum((after[c][0] - before[c][0]) / max(after[c][1] - before[c][1], 1) for c in after if c in before)
    return idle if after else None


def core_to_spare(cpus: int, threads: int, idle: float | None) -> tuple[bool, str]:
    """Whether the run has a core its training threads do not use and nothing else keeps busy, and if not, why."""
    if cpus <= threads:
        return False, ""
    if idle is not None and idle - threads < FREE_CORE:
        return False, (f"the {cpus - threads} core(s) training does not use are busy with other work ({idle:.1f} of "
                       f"{cpus} cores idle before the first step)")
    return True, ""


def compiled_slower(eager_ms: Sequence[float], compiled_ms: Sequence[float],
                    eager_when: str) -> tuple[bool, float, str] | None:
    """After the switch: whether the compiled steps ran clearly slower than the eager ones (:data:`REVERT_AT`), the
    speedup (eager over compiled median) and the two medians in words; None until :data:`CHECK_STEPS` compiled steps are
    timed. ``eager_when`` says which eager steps ``eager_ms`` are."""
    if len(compiled_ms) < CHECK_STEPS or not eager_ms:
        return None
    eager, compiled = statistics.median(eager_ms), statistics.median(compiled_ms)
    said = (f"compiled steps {compiled:.4g} ms against eager {eager:.4g} ms (medians of the first {len(compiled_ms)} "
            f"compiled steps after the switch and of {len(eager_ms)} eager steps {eager_when})")
    return compiled >= REVERT_AT * eager, eager / compiled, said


def worth_starting(eager_ms: float | None, steps_left: float | None, spare_core: bool) -> tuple[bool, str]:
    """``auto``: whether to start a compile process, and why not. With a core training does not use, it
    costs the run nothing; without one, only a long run can repay the core it takes (:data:`LONG_RUN_S`)."""
    if spare_core or steps_left is None or eager_ms is None:
        return True, ""
    left_s = steps_left * eager_ms / 1e3
    why = (f"about {left_s:.0f} s of training are left and every core trains: a compile process would take a core "
           f"for about as long as compiling first costs, which a CPU speedup repays only over {LONG_RUN_S:.0f} s "
           "or more")
    return left_s >= LONG_RUN_S, why


def steps_left(module: Any) -> float | None:
    """Optimizer steps the module's trainer has left (None: no trainer, or no known end)."""
    try:
        trainer = module.trainer
        total = float(trainer.estimated_stepping_batches)
    except Exception:  # not attached, or Lightning cannot tell
        return None
    return max(0.0, total - trainer.global_step) if math.isfinite(total) else None


class LateStep:
    """The training step while the compile runs beside the run: the user's eager step until :meth:`compile`
    applies the plan (``torch.compile`` itself loads Inductor, 0.5-0.8 s before the first step; a run that
    never switches never pays it)."""

    def __init__(self, module: Any, step: Step, plan: CompilePlan, compiled: CompiledModules, accumulate: int) -> None:
        self.module, self.step, self.plan, self.compiled, self.accumulate = module, step, plan, compiled, accumulate

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.step(*args, **kwargs)

    def compile(self) -> None:
        self.step = apply_compile(self.module, self.step, self.plan, self.compiled, self.accumulate)


class NoBackground(StackComponent):
    """``compile.background`` resolved to ``disabled``: the step compiles as torch.compile does, in the run."""

    name = "background"
    pending = False
    kept_eager = False

    def compile_step(self, module: Any, step: Step, plan: CompilePlan, compiled: CompiledModules,
                     accumulate: int) -> Step:
        """Compile now, in the run."""
        return apply_compile(module, step, plan, compiled, accumulate)

    def __init__(self, policy: Background, why: str | None) -> None:
        self.policy, self.why = policy, why

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"compile/background": self.policy.value}
        if self.why is not None:
            out["compile/background_outcome"] = self.why if self.why == NOTHING else f"compiled in the run: {self.why}"
        return out
