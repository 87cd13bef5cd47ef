"""Which ``compile.background`` component a fit gets (:func:`build_background`), and on a CUDA device the reading
of its memory that ``auto`` starts the compile process on (:func:`cuda_room`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from runner.config.schema import Background
from runner.stack.background.policy import DeviceRoom, NoBackground, resolve_background
from runner.stack.background.run_side import BackgroundCompile
from runner.stack.compiling.plan import CompilePlan
from runner.stack.dynamic.agreement import world_size
from runner.stack.settings import CompileSettings, LightningSide
from runner.stack.step_mode import StepMode

log = logging.getLogger(__name__)


def cuda_room(device: torch.device) -> Callable[[], DeviceRoom]:
    """Reads ``device``'s free and total memory and the run's peak allocated bytes so far, when called."""
    def read() -> DeviceRoom:
        free, total = torch.cuda.mem_get_info(device)
        return DeviceRoom(free, total, torch.cuda.max_memory_allocated(device))

    return read


def build_background(settings: CompileSettings, plan: CompilePlan, lightning: LightningSide, pulls_batches: bool,
                     say: Callable[[str], None], step_mode: StepMode) -> NoBackground | BackgroundCompile:
    """The component ``compile.background`` asks for on this machine (in the run where it cannot run beside)."""
    policy, why = resolve_background(settings.compile.background, plan, world_size(), pulls_batches, lightning.device)
    if policy is Background.disabled:
        if why is not None and settings.compile.background is not Background.auto:
            log.warning("compile.background=%s: %s; it compiles in the first step instead",
                        settings.compile.background.value, why)
        return NoBackground(settings.compile.background, why)
    on_cuda = policy is Background.auto and lightning.device.type == "cuda"
    return BackgroundCompile(policy, settings, lightning, say, step_mode,
                             room=cuda_room(lightning.device) if on_cuda else None)
