"""How the optimizer step runs (``compile.optimizer``): eager, fused kernel, or compiled."""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.optim import Optimizer

from runner.config.schema import OptimizerPolicy
from runner.stack.compiling.optimizer_policy import eager_only, supports_fused
from runner.stack.optimizer.graphed import CapturedStep, Clipping, GraphSafeStep, capture_figures
from runner.stack.step_mode import StepMode
from runner.torch_internals import runtime

log = logging.getLogger(__name__)

_MISSING = object()
# Set while runner's compiled optimizer step runs: Dynamo traces it inside that call (its first calls).
_IN_COMPILED_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar("runner_compiled_optimizer_step",
                                                                          default=False)
_TORCH_OPTIM_DIR = os.path.dirname(torch.optim.__file__) + os.sep


def in_runners_optimizer_step(filename: str) -> bool:
    """Whether code in ``filename`` running now is torch's optimizer code inside the optimizer step runner
    compiled (``compile.optimizer=compiled``): a graph break Dynamo reports there is runner's, expected
    (torch's steps break by design), not the user's. A step hook of the user's is in the user's file."""
    return _IN_COMPILED_STEP.get() and os.path.abspath(filename).startswith(_TORCH_OPTIM_DIR)


@dataclass
class OptimizerStep:
    """Prepares each optimizer for the resolved policy, and undoes it."""

    policy: OptimizerPolicy
    reason: str
    compile_kwargs: dict[str, Any]
    eager: dict[str, str] = field(default_factory=dict)
    demoted_at: int | None = None
    step_mode: StepMode = field(default_factory=StepMode)
    clipping: Clipping = field(default_factory=Clipping)
    capture: bool = False
    blocker: str | None = None
    asked_graphed: bool = False
    capturer: Any = None

    compiled_steps: int = 0
    eager_steps: int = 0

    def __post_init__(self) -> None:
        self._prior: list[tuple[Optimizer, Any]] = []  # (optimizer, its instance ``step`` before ours)
        self._lrs: list[tuple[Optimizer, list[torch.Tensor]]] = []  # the LR tensors installed, per group
        self.graphed: list[CapturedStep] = []

    def prepare(self, optimizer: Optimizer, device: torch.device) -> None:
        """Adapt the optimizer once, before the first step."""
        graphed = self.policy is OptimizerPolicy.graphed
        if self.policy is OptimizerPolicy.fused or graphed:
            if not supports_fused(optimizer, device):
                raise ValueError(
                    f"compile.optimizer=fused: {type(optimizer).__name__} has no fused kernel on {device.type}. "
                    "Use compile.optimizer=auto (picks the fastest supported choice) or compiled."
                )
            # In place, so the LR scheduler built in configure_optimizers keeps its optimizer.
            optimizer.defaults.update(fused=True, foreach=False)
            for group in optimizer.param_groups:
                group.update(fused=True, foreach=False)
        elif self.policy is OptimizerPolicy.compiled and (why := eager_only(optimizer)) is not None:
            self.eager[type(optimizer).__name__] = why
            log.info("compile.optimizer=compiled: %s runs eagerly: %s", type(optimizer).__name__, why)
            return
        if not graphed and self.policy is not OptimizerPolicy.compiled:
            return
        # A Python-float LR is a guarded constant (every scheduler change would recompile) or, in a captured
        # graph, a constant baked in. A tensor LR on the device is an input; LRScheduler fills it in place.
        for group in optimizer.param_groups:
            if not isinstance(group["lr"], torch.Tensor) or group["lr"].device != device:
                group["lr"] = torch.tensor(float(group["lr"]), device=device)
        self._lrs.append((optimizer, [group["lr"] for group in optimizer.param_groups]))
        self._prior.append((optimizer, vars(optimizer).get("step", _MISSING)))
        if graphed:
            # Clipping, the update and zeroing as one graph-safe function (runner.stack.optimizer.graphed), run by
            # the optimizer's step after Lightning's closure.
            if self.capture:
                for group in optimizer.param_groups:
                    group["capturable"] = True  # torch's check before a capture; the fused state is on the device
            captured = CapturedStep(GraphSafeStep(optimizer, self.clipping, device), self.capture, self.capturer)
            self.graphed.append(captured)
            # Not counted as compiled or eager steps: no stance changes what it runs (the speedup meter's eager
            # steps replay it too).
            optimizer.step = _closure_step(optimizer, captured, None,  # type: ignore[method-assign]
                                           on_error=captured.step.zero_grads)
            return
        # The class's step, not ``optimizer.step``: an LR scheduler replaces the latter with a wrapper
        # that Dynamo refuses to trace (a graph break and an eager step every time).
        compiled = torch.compile(type(optimizer).step.__get__(optimizer), **self.compile_kwargs)
        optimizer.step = _closure_step(optimizer, compiled, self._count)  # type: ignore[method-assign]

    def skip_on_device(self, limit: int) -> GraphSafeStep | None:
        """Hand ``reliability.on_nonfinite=skip`` to the graph-safe step (before the first step): it skips updates
        whose gradients are non-finite on the device and records the first ``limit`` skipped steps. Returns that
        step (its ``read_skips``), or None where the fit's optimizer step is not one graph-safe step."""
        if len(self.graphed) != 1:
            return None
        self.graphed[0].step.skip_on_device(limit)
        return self.graphed[0].step

    @property
    def installed_lrs(self) -> list[torch.Tensor]:
        """The LR tensors installed for compiled steps, one per param group of each compiled optimizer."""
        return [lr for _, lrs in self._lrs for lr in lrs]

    def _count(self) -> None:
        if self.step_mode.eager:
            self.eager_steps += 1
        else:
            self.compiled_steps += 1

    def after_restore(self) -> None:
        """After the optimizers' state was loaded from a checkpoint: each compiled optimizer's groups hold the LR
        tensors installed here again, the restored values copied in."""
        for optimizer, lrs in self._lrs:
            for group, lr in zip(optimizer.param_groups, lrs, strict=True):
                restored = group["lr"]
                if restored is not lr:
                    with torch.no_grad():
                        lr.copy_(restored) if isinstance(restored, torch.Tensor) else lr.fill_(float(restored))
                    group["lr"] = lr
                # As its first compiled step would have made them: Dynamo sets capturable only while the state is empty.
                if lr.device.type == "cuda" and type(optimizer).__module__.startswith("torch.optim"):
                    _make_capturable(optimizer, group)

    def demote(self, step: int) -> None:
        """Run every compiled optimizer step eagerly from now on (after a recompile storm). A graph-safe step
        compiles nothing, so no storm is its: it stays (Lightning's zeroing and clipping are off for it)."""
        if self.graphed:
            return
        self.restore()
        self.demoted_at = step

    def restore(self) -> None:
        """Give each optimizer back its own ``step`` (the LR scheduler's counting wrapper included); a graph-safe
        step's optimizer no longer skips on its flag."""
        for graphed in self.graphed:
            runtime.skip_update_on(graphed.step.optimizer, None)
        for optimizer, prior in reversed(self._prior):
            if prior is _MISSING:
                vars(optimizer).pop("step", None)
            else:
                optimizer.step = prior  # type: ignore[method-assign]
        self._prior = []

    def figures(self) -> dict[str, Any]:
        policy, reason = self.policy.value, self.reason
        if self.policy is OptimizerPolicy.compiled and self.eager and not self._prior and self.demoted_at is None:
            policy, reason = OptimizerPolicy.none.value, "; ".join(f"{k}: {v}" for k, v in self.eager.items())
        out: dict[str, Any] = {"compile/optimizer": policy, "compile/optimizer_reason": reason}
        if self.compiled_steps or self.eager_steps:
            out["compile/optimizer_compiled_steps"] = self.compiled_steps
            out["compile/optimizer_eager_steps"] = self.eager_steps
            if self.eager_steps:
                out["compile/optimizer_reason"] = (f"{reason}; {self.eager_steps} of its steps ran eagerly (forced "
                                                   "eager: the speedup meter's eager and FLOP steps, and steps "
                                                   "before a compile.background switch)")
            if not self.compiled_steps:
                out["compile/optimizer"] = OptimizerPolicy.none.value
        if self.demoted_at is not None:
            out["compile/optimizer"] = OptimizerPolicy.none.value
            out["compile/optimizer_reason"] = (f"compiled until optimizer step {self.demoted_at}, then demoted "
                                               "(recompile storm)")
        if self.eager:
            out["compile/optimizer_eager"] = dict(self.eager)
        if self.graphed:
            out.update(capture_figures(self.graphed))
            if (stopped := next((g.stopped for g in self.graphed if g.stopped), None)) is not None:
                out["compile/optimizer_reason"] = f"{out['compile/optimizer_reason']}; {stopped}"
        return out

    def describe(self) -> str:
        """The optimizer step in a few words, for the end-of-fit line."""
        text = str(self.figures()["compile/optimizer"])
        if self.graphed:
            g = capture_figures(self.graphed)
            text += (f" ({self.clipping.describe()}; {g['cudagraphs/optimizer_recordings']} recorded, "
                     f"{g['cudagraphs/optimizer_replays']} replayed)" if self.capture else
                     f" ({self.clipping.describe()}; uncaptured)")
        elif self.blocker is not None and (self.capture or self.asked_graphed):
            text += f" (not graph-safe: {self.blocker})"
        return text


def _make_capturable(optimizer: Optimizer, group: dict[str, Any]) -> None:
    """``capturable=True`` for a group whose parameters are all on CUDA, its ``step`` counters moved there
    (torch keeps them on the CPU for a non-capturable group)."""
    if group.get("capturable", True) or not all(p.is_cuda for p in group["params"]):
        return  # no such flag, already capturable, or not on CUDA
    group["capturable"] = True
    for p in group["params"]:
        state = optimizer.state.get(p, {})
        if isinstance(state.get("step"), torch.Tensor):
            state["step"] = state["step"].to(device=p.device, dtype=torch.float32)


def _closure_step(optimizer: Optimizer, compiled: Callable[..., Any], count: Callable[[], None] | None,
                  on_error: Callable[[], None] | None = None) -> Callable[..., Any]:
    """``optimizer.step(closure=None, **kwargs)`` as torch's optimizers run it, the update compiled (or graphed).
    ``count``: each step counted (None: not); ``on_error``: after a closure that raised, before the error goes on."""

    def step(closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        loss = None
        if closure is not None:
            try:
                with torch.enable_grad():
                    loss = closure()
            except BaseException:
                if on_error is not None:
                    on_error()
                raise
        if count is not None:
            count()
        token = _IN_COMPILED_STEP.set(True)
        try:
            compiled(**kwargs)
        finally:
            _IN_COMPILED_STEP.reset(token)
        optimizer._opt_called = True  # type: ignore[attr-defined]  # what an LR scheduler's wrapper records
        return loss

    # An LR scheduler checks for its own wrapper's mark on ``optimizer.step`` (else it warns that the
    # step was overridden after it was built) and then reads ``_opt_called``, set above.
    step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    return step
