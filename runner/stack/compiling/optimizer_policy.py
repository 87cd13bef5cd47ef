"""How the optimizer step runs, decided per optimizer and device (``compile.optimizer``): pure functions of the
optimizer, the device and what the fit found, tested without stepping anything. ``plan.resolve_optimizers`` applies
them to a fit's optimizers; ``runner.stack.optimizer`` carries the decision out."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch.optim import Optimizer

from runner.config.decisions import gpu_defaults
from runner.config.schema import OptimizerPolicy
from runner.torch_internals import runtime


def supports_fused(optimizer: Optimizer, device: torch.device) -> bool:
    """Whether the optimizer class takes ``fused=True`` and has a fused kernel for the device."""
    if "fused" not in inspect.signature(type(optimizer).__init__).parameters:
        return False
    return device.type in runtime.fused_kernel_devices()


def holds_dtensors(optimizer: Optimizer) -> bool:
    """Whether the optimizer's parameters are sharded ``DTensor``s (FSDP2)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for group in optimizer.param_groups for p in group["params"])


def eager_only(optimizer: Optimizer) -> str | None:
    """Why the optimizer's step cannot run as runner's own step (compiled or graph-safe; None: it can). A ``step``
    that requires its closure (``LBFGS`` calls it repeatedly), or a ``step`` the user wrote (it may call the
    closure anywhere, or return something else), keeps Lightning's call ``optimizer.step(closure)``."""
    step = type(optimizer).step
    closure = inspect.signature(step).parameters.get("closure")
    if closure is not None and closure.default is inspect.Parameter.empty:
        return "its step requires the closure (it calls it repeatedly)"
    if not getattr(step, "__module__", "").startswith("torch.optim"):
        return f"its step is its own ({step.__qualname__}), which may call the closure itself"
    return None


@dataclass(frozen=True)
class StepFacts:
    """What the fit found that decides whether its optimizer step can be captured (Lightning's side)."""

    automatic_optimization: bool = True
    scaler: bool = False
    sharded: bool = False
    gradient_hooks: tuple[str, ...] = ()


def capture_blocker(optimizers: list[Optimizer], device: torch.device, facts: StepFacts) -> str | None:
    """Why the optimizer step cannot run as one graph-safe function, clipping, the non-finite skip, the update and
    zeroing in it (None: it can). Each reason is one the summary shows beside the step that runs instead."""
    if not facts.automatic_optimization:
        return "manual optimization (the module steps its optimizers itself)"
    if len(optimizers) != 1:
        return f"{len(optimizers)} optimizers (Lightning's automatic optimization steps one)"
    opt = optimizers[0]
    name = type(opt).__name__
    if facts.scaler:
        return "a gradient scaler (16-mixed) unscales the gradients and skips the step itself"
    if facts.sharded or holds_dtensors(opt):
        return "FSDP2 shards the gradients (clipping them by norm takes a collective)"
    if (why := eager_only(opt)) is not None:
        return f"{name}: {why}"
    if not supports_fused(opt, device):
        return f"{name} has no fused {device.type} kernel (the update that skips a step on the device)"
    if any(group.get("momentum") and group.get("dampening") for group in opt.param_groups):
        return (f"{name} with dampening: a first step skipped on the device would leave its momentum buffers "
                "unset, and a zero buffer is not the same start when dampened")
    if facts.gradient_hooks:
        return (f"{', '.join(facts.gradient_hooks)} runs between backward and the update, where it may clip, read or "
                "replace gradients itself")
    return None


def resolve_optimizer_policy(
    policy: OptimizerPolicy, optimizer: Optimizer, device: torch.device, cudagraphs: bool,
    scaler: bool = False, blocker: str | None = None,
) -> tuple[OptimizerPolicy, str]:
    """The concrete policy for ``auto`` (and for ``graphed`` where ``blocker`` says it cannot run), with the reason
    (logged and in the report). ``blocker``: :func:`capture_blocker` of the fit."""
    name = type(optimizer).__name__
    if blocker is None and not supports_fused(optimizer, device):  # the graph-safe step skips inside the kernel
        blocker = f"{name} has no fused {device.type} kernel (the update that skips a step on the device)"
    # A compiled step with a scaler is refused before this (runner.config.decisions.stack, by the config check and the
    # stack).
    if policy is OptimizerPolicy.graphed and blocker is None:
        return policy, ("set in config: clipping, the update and zeroing in one graph-safe function"
                        + (", captured in a CUDA graph" if cudagraphs else " (uncaptured: CUDA graphs are off)"))
    if policy is OptimizerPolicy.graphed:
        chosen, why = resolve_optimizer_policy(OptimizerPolicy.auto, optimizer, device, cudagraphs, scaler, blocker)
        return chosen, f"compile.optimizer=graphed cannot run: {blocker}; instead {chosen.value}: {why}"
    if policy is not OptimizerPolicy.auto:
        return policy, "set in config"
    if scaler:
        if supports_fused(optimizer, device):
            return OptimizerPolicy.fused, (f"a gradient scaler (16-mixed) steps {name}: its fused {device.type} "
                                           "kernel takes the scale and the inf check on the device")
        return OptimizerPolicy.none, (f"a gradient scaler (16-mixed) steps {name}, which has no fused "
                                      f"{device.type} kernel: it runs as configured")
    # auto picks graphed only once the GPU rows measure it at least as fast as the fused step it would replace
    # (runner.config.decisions.gpu_defaults, the one line that decides). compile.optimizer=graphed asks for it
    # (docs/compile.md).
    if cudagraphs and blocker is None and gpu_defaults.OPTIMIZER_AUTO_GRAPHED:
        return OptimizerPolicy.graphed, ("CUDA graphs are on and nothing blocks the graph-safe step: clipping, the "
                                         "update and zeroing in a CUDA graph of its own (measured at least as fast "
                                         "as the fused step on a GPU: runner.config.decisions.gpu_defaults)")
    if not cudagraphs:
        not_captured = ""
    elif blocker is not None:
        not_captured = f" (not captured: {blocker})"
    else:
        not_captured = "; compile.optimizer=graphed captures it, with clipping and zeroing, in a CUDA graph of its own"
    if cudagraphs and supports_fused(optimizer, device):
        # A compiled optimizer step would be a CUDA-graph tree root of its own, recorded apart from the
        # step's graphs and copying every gradient into its static inputs on each replay.
        return OptimizerPolicy.fused, (f"CUDA graphs are on and {name} has a fused {device.type} kernel: it steps "
                                       f"outside the graph tree, nothing to record or copy{not_captured}")
    if cudagraphs:
        return OptimizerPolicy.compiled, ("CUDA graphs are on: a compiled step is captured with the rest of the step"
                                          f"{not_captured}")
    sharded = holds_dtensors(optimizer)
    if sharded and supports_fused(optimizer, device):
        return OptimizerPolicy.fused, (
            f"{name} over DTensor shards (FSDP2) has a fused {device.type} kernel: DTensor runs it once on each "
            "rank's local shards, no collective and no compile time (2 gloo CPU ranks, 2-layer GPT: 1.04 ms per "
            "step fused, 1.61 ms foreach)"
        )
    if sharded:
        return OptimizerPolicy.none, (
            f"{name} over DTensor shards (FSDP2) has no fused {device.type} kernel: its foreach implementation runs "
            "on the local shards (a compiled step would trace DTensor's dispatch, compiling for minutes)"
        )
    if supports_fused(optimizer, device):
        return OptimizerPolicy.fused, (
            f"{name} has a fused {device.type} kernel: one kernel for all parameters, no compile time "
            "(on a 2-core CPU it measured ~5x faster than foreach, and faster than a compiled step)"
        )
    return OptimizerPolicy.compiled, f"{name} has no fused {device.type} kernel: compiling the step fuses it"
