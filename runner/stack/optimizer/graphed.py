"""The optimizer step as one graph-safe function, captured once in a CUDA graph and replayed
(``compile.optimizer=graphed``; ``auto`` does not pick it until it is measured on a GPU)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim import Optimizer

from runner.torch_internals import runtime

WARMUP_CALLS = 2
MAX_RECORDINGS = 3


@dataclass(frozen=True)
class Clipping:
    """Lightning's gradient clipping, taken over: ``trainer.gradient_clip_val`` (None or 0: none) and
    ``gradient_clip_algorithm`` (``norm`` or ``value``)."""

    value: float | None = None
    algorithm: str = "norm"

    @property
    def by_norm(self) -> bool:
        return bool(self.value) and self.algorithm != "value"

    @property
    def by_value(self) -> bool:
        return bool(self.value) and self.algorithm == "value"

    def describe(self) -> str:
        return f"clipped by {self.algorithm} at {self.value}" if self.value else "no clipping"


def _constants(optimizer: Optimizer) -> list[tuple[Any, ...]]:
    """What a captured update bakes in: each group's values (a tensor by its address)."""
    return [tuple((k, v.data_ptr() if isinstance(v, torch.Tensor) else v) for k, v in g.items() if k != "params")
            for g in optimizer.param_groups]


def prime_momentum(optimizer: Optimizer) -> None:
    """Give each parameter of a momentum group a zero momentum buffer before the first step."""
    # A fused SGD step makes its buffers with empty_like on the first step and fills them in its kernel, so a first
    # step skipped on the device would leave them uninitialised; from zero, the first update is momentum * 0 + grad,
    # exactly the grad it starts from (undampened: capture_blocker refuses dampening).
    for group in optimizer.param_groups:
        if not group.get("momentum"):  # no momentum buffer: Adam's groups have no such key, SGD's may be 0
            continue
        for p in group["params"]:
            state = optimizer.state[p]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)


# Everything after backward (clipping, the non-finite skip, the update, zeroing) as one function of tensors that
# never move, with no host read and no branch on a device value: clipping through torch's get_total_norm and
# clip_grads_with_norm_ (Lightning's calls); found_inf from the gradients' total norm, handed to the fused kernel as
# a gradient scaler hands it, so the kernel itself skips the update; gradients zeroed in place, never set to None,
# so their addresses stay fixed. The learning rate is a device tensor a scheduler fills in place; the other
# hyper-parameters are constants of the fused kernel, so changing one captures again (counted). A replay is right
# only while the captured tensors are the ones in use: each call checks every gradient is the tensor it bound and
# the constants are unchanged; after MAX_RECORDINGS captures the step stays uncaptured, and the report says why.
class GraphSafeStep:
    """One optimizer's step after backward as a graph-safe function (see the module docstring)."""

    def __init__(self, optimizer: Optimizer, clipping: Clipping, device: torch.device) -> None:
        self.optimizer = optimizer
        self.clipping = clipping
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self.grads: list[torch.Tensor | None] = []
        self._live: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])  # (gradients, their parameters)
        self.skipping = False
        self.found_inf = torch.zeros((), device=device)
        self.calls = torch.zeros((), dtype=torch.long, device=device)
        self.skipped = torch.zeros((), dtype=torch.long, device=device)
        self.skipped_at = torch.zeros(1, dtype=torch.long, device=device)

    def skip_on_device(self, limit: int) -> None:
        """Skip updates whose gradients are non-finite, on the device, recording the first ``limit`` skipped steps
        (their index among this fit's optimizer steps); before the first step (a capture bakes it in)."""
        self.skipping = True
        self.skipped_at = torch.zeros(max(1, limit), dtype=torch.long, device=self.found_inf.device)
        prime_momentum(self.optimizer)

    def count_from(self, step: int) -> None:
        """Count optimizer steps from ``step`` (the trainer's global step when training starts), so a recorded skip
        is that step's index."""
        self.calls.fill_(step)

    def read_skips(self) -> tuple[int, list[int]]:
        """(updates skipped so far, the indices of the first ``limit`` of them): one host read."""
        values = torch.cat([self.skipped.view(1), self.skipped_at]).tolist()
        return values[0], values[1:1 + min(values[0], len(values) - 1)]

    def bound(self) -> bool:
        """Whether every parameter's gradient is the tensor the function reads (None included)."""
        return all(p.grad is g for p, g in zip(self.params, self.grads, strict=True))

    def bind(self) -> None:
        """Read the gradients as they are now, each copied once into memory of its own: a gradient the backward
        handed over may live in a CUDA-graph tree's pool, which a later recording reuses."""
        for p in self.params:
            if p.grad is not None:
                p.grad = p.grad.clone()
        self.grads = [p.grad for p in self.params]
        self._live = ([p.grad for p in self.params if p.grad is not None],
                      [p for p in self.params if p.grad is not None])

    def __call__(self) -> None:
        """Clip, check, update, zero: device work only, the same every call."""
        grads, params = self._live
        if grads and (self.skipping or self.clipping.by_norm):
            total = torch.nn.utils.get_total_norm(grads)
            if self.skipping:
                self._record_skip(total)
            if self.clipping.by_norm:
                torch.nn.utils.clip_grads_with_norm_(params, float(self.clipping.value or 0.0), total)
        if self.clipping.by_value:
            torch.nn.utils.clip_grad_value_(params, float(self.clipping.value or 0.0))
        runtime.skip_update_on(self.optimizer, self.found_inf if self.skipping else None)
        type(self.optimizer).step(self.optimizer)  # the class's: an LR scheduler's wrapper is not in the graph
        self.zero_grads()
        self.calls.add_(1)

    def _record_skip(self, total: torch.Tensor) -> None:
        bad = torch.logical_not(torch.isfinite(total))
        self.found_inf.copy_(bad)
        slot = self.skipped.clamp(max=self.skipped_at.numel() - 1).view(1)
        self.skipped_at.index_copy_(0, slot, torch.where(bad, self.calls, self.skipped_at.index_select(0, slot)))
        self.skipped.add_(bad.long())

    def zero_grads(self) -> None:
        """Zero every bound gradient in place (also after a closure that raised: the next step starts at zero)."""
        if self._live[0]:
            runtime.zero_in_place(self._live[0])


class CudaGraphCapture:
    """How :class:`CapturedStep` warms the function up and captures it on CUDA: each warm-up on a side stream (as
    ``torch.cuda.graph`` requires), the capture into one ``torch.cuda.CUDAGraph``, whose replay it returns."""

    def __init__(self) -> None:
        self._stream: Any = None

    def warm_up(self, fn: Callable[[], None]) -> None:
        stream = self._stream = self._stream or torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)

    def capture(self, fn: Callable[[], None]) -> Callable[[], None]:
        graph = torch.cuda.CUDAGraph()
        # A capture records and runs nothing (the caller replays it for this step's update). thread_local, as
        # Inductor's CUDA-graph trees capture: runner's console and compile threads may touch CUDA meanwhile.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            fn()
        return graph.replay


class CapturedStep:
    """Runs a :class:`GraphSafeStep`: with ``capture``, warmed up ``WARMUP_CALLS`` times, captured once and
    replayed (``capturer``: :class:`CudaGraphCapture`, the seam the CPU tests drive the same logic through);
    otherwise called as it is. Counts what happened."""

    def __init__(self, step: GraphSafeStep, capture: bool, capturer: Any = None) -> None:
        self.step = step
        self.capture = capture
        self.capturer = capturer if capturer is not None else CudaGraphCapture()
        self.replay: Callable[[], None] | None = None
        self.recordings = 0
        self.replays = 0
        self.uncaptured = 0
        self.stopped: str | None = None
        self._warmups = 0
        self._constants: list[tuple[Any, ...]] = []

    def __call__(self, **_: Any) -> None:
        step = self.step
        if not step.grads or not step.bound():
            if step.grads:
                self._drop("a gradient was replaced (a hook set .grad), so the step was bound again")
            step.bind()
        if self.replay is not None and _constants(step.optimizer) != self._constants:
            self._drop("a hyper-parameter the fused kernel takes as a constant changed (betas, weight decay, eps)")
        if not self.capture or self.stopped is not None:
            self.uncaptured += 1
            step()
            return
        if self.replay is None and self._warmups < WARMUP_CALLS:
            self._warmups += 1
            self.uncaptured += 1
            self.capturer.warm_up(step)
            return
        if self.replay is None:
            self._constants = _constants(step.optimizer)
            self.replay, self.recordings = self.capturer.capture(step), self.recordings + 1
        self.replay()
        self.replays += 1

    def _drop(self, why: str) -> None:
        self.replay, self._warmups = None, 0
        if self.recordings >= MAX_RECORDINGS:
            self.stopped = f"uncaptured after {self.recordings} captures: {why}"


def capture_figures(steps: list[CapturedStep]) -> dict[str, Any]:
    """What the graph-safe steps did: captures, replays, and calls that ran uncaptured."""
    return {"cudagraphs/optimizer_recordings": sum(g.recordings for g in steps),
            "cudagraphs/optimizer_replays": sum(g.replays for g in steps),
            "cudagraphs/optimizer_uncaptured": sum(g.uncaptured for g in steps)}


def gradient_hooks(module: Any, callbacks: list[Any]) -> list[str]:
    """Who may read or change gradients before the update in a way a captured step cannot follow: the module's own
    ``on_before_optimizer_step`` or ``configure_gradient_clipping``, and each callback with an
    ``on_before_optimizer_step`` (runner's own declare ``leaves_gradients_alone``); a group's members each."""
    from lightning.pytorch import Callback, LightningModule
    from lightning.pytorch.utilities.model_helpers import is_overridden

    found = [f"{type(module).__name__}.{hook}" for hook in ("on_before_optimizer_step", "configure_gradient_clipping")
             if is_overridden(hook, module, LightningModule)]
    for callback in _flat(callbacks):
        if is_overridden("on_before_optimizer_step", callback, Callback) and \
                not getattr(callback, "leaves_gradients_alone", False):
            found.append(f"{type(callback).__name__}.on_before_optimizer_step")
    return found


def _flat(callbacks: list[Any]) -> Iterator[Any]:
    for callback in callbacks:
        members = getattr(callback, "members", None)
        yield from (members if isinstance(members, list) else [callback])
