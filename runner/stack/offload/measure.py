"""What a saved-activation strategy saves, and what it costs in gradient accuracy."""

from __future__ import annotations

import copy
import gc
import itertools
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import Any, Optional

import torch
from torch import nn

from runner.config.schema import OffloadConfig, OffloadStrategy
from runner.torch_internals import runtime

LossFn = Callable[[nn.Module, Any], torch.Tensor]
CompileFn = Callable[[Callable[..., Any]], Callable[..., Any]]
_VARIANT_IDS = itertools.count()


class _Meter:
    bytes: int = 0


@contextmanager
def saved_bytes_meter(device: torch.device) -> Iterator[_Meter]:
    """Measure the net bytes allocated inside the block (see the module docstring)."""
    meter = _Meter()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        yield meter
        torch.cuda.synchronize(device)
        meter.bytes = torch.cuda.memory_allocated(device) - before
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        yield meter
    # self_cpu_memory_usage is allocations minus frees of each op itself: the sum over all ops
    # (plus the "[memory]" row for allocations outside any op) is the net growth of the block.
    meter.bytes = int(sum(e.self_cpu_memory_usage for e in prof.key_averages()))


def flat_grads(model: nn.Module) -> torch.Tensor:
    """All parameter gradients as one float64 vector (missing gradients as zeros)."""
    parts = [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).double()
        for p in model.parameters()
    ]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def rel_error(g: torch.Tensor, ref: torch.Tensor) -> float:
    """``||g - ref|| / ||ref||`` (0 when both are zero)."""
    denom = float(ref.norm())
    return float((g - ref).norm()) / denom if denom > 0 else float(g.norm())


class HostGrads:
    """A model's gradients copied to host memory in their own dtype (a missing gradient is None)."""

    def __init__(self, model: nn.Module) -> None:
        self.grads = [None if p.grad is None else p.grad.detach().to("cpu", copy=True) for p in model.parameters()]

    def rel_error(self, model: nn.Module) -> float:
        """:func:`rel_error` of ``model``'s gradients against these, summed one parameter at a time in
        float64 (a missing gradient counts as zeros)."""
        diff = ref = 0.0
        params = list(model.parameters())
        if len(params) != len(self.grads):
            raise ValueError(f"{len(params)} parameters, but {len(self.grads)} reference gradients")
        for p, r in zip(params, self.grads, strict=True):
            g = None if p.grad is None else p.grad.detach().to("cpu", torch.float64)
            r64 = None if r is None else r.to(torch.float64)
            if r64 is not None:
                ref += float(r64.square().sum())
            if g is not None and r64 is not None:
                diff += float((g - r64).square().sum())
            elif g is not None or r64 is not None:
                diff += float((g if g is not None else r64).square().sum())  # type: ignore[union-attr]
        return (diff**0.5) / (ref**0.5) if ref > 0 else diff**0.5


StepBuilder = Callable[[nn.Module], Callable[[Any], torch.Tensor]]

_NO_REDUCTION = 1.02


def compare_with_none(
    model: nn.Module,
    batch: Any,
    cfg: OffloadConfig,
    build_step: StepBuilder,
    device: torch.device,
    block_types: tuple[str, ...] = (),
    compiled: bool = False,
    fresh_compiler: Optional[Callable[[], None]] = None,
) -> dict[str, Any]:
    """Compare ``cfg`` with ``strategy=none`` on one batch from identical weights, each variant on a fresh copy and a
    fresh compiler (Dynamo does not guard on settings such as the memory budget, so a variant could otherwise reuse the
    other's graphs). ``fresh_compiler`` forgets what was compiled (default: ``torch.compiler.reset()``, everything)."""
    from runner.stack.offload.component import build_offload

    def run(variant: OffloadConfig, reference: Optional[HostGrads] = None) -> dict[str, Any]:
        # One check step of ``variant`` on a fresh copy of ``model``: saved bytes, loss, path, and either its gradients
        # in host memory (``grads``) or, given the ``reference`` gradients, their relative error (``grad_rel_error``).
        m = copy.deepcopy(model).to(device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the cpu-on-CPU warning was already given by the run
            comp = build_offload(variant, device, block_types)
        comp.configure()
        try:
            comp.apply(m)
            fn = build_step(m)
            b = comp.prepare_batch(batch)

            def step(meter_cm: AbstractContextManager[Any]) -> tuple[torch.Tensor, Any]:
                with meter_cm as meter, comp.step_context():  # the meter counts what the forward saves
                    loss = fn(b)
                if loss.requires_grad:
                    loss.backward()
                return loss, meter

            step(nullcontext())  # the first step compiles: not measured
            m.zero_grad(set_to_none=True)
            gc.collect()
            loss, meter = step(saved_bytes_meter(device))
            out: dict[str, Any] = {
                "saved_bytes": meter.bytes,
                "loss": float(loss.detach()),
                "path": comp.current_path(),
            }
            if reference is not None:
                out["grad_rel_error"] = reference.rel_error(m)
            else:
                out["grads"] = HostGrads(m)
            return out
        finally:
            comp.teardown()

    fresh = fresh_compiler or runtime.reset_compiler
    # run copies ``model`` for each variant: both start from its weights as they are now. One copy at a time: the
    # first one's compiled frames are forgotten and its reference cycles (a module's compiled instance forward holds
    # the module) collected before the second copy is made.
    fresh()
    base = run(replace(cfg, strategy=OffloadStrategy.none))
    fresh()
    gc.collect()
    var = run(cfg, reference=base.pop("grads"))
    fresh()
    gc.collect()
    saved_none, saved = base["saved_bytes"], var["saved_bytes"]
    reduction = saved_none / saved if saved > 0 else float("inf")
    return {
        "offload/saved_bytes_none": saved_none,
        "offload/saved_bytes": saved,
        "offload/reduction_x": reduction,
        "offload/grad_rel_error": var["grad_rel_error"],
        "offload/loss_abs_diff": abs(var["loss"] - base["loss"]),
        "offload/measure_path": _measured_path(var["path"], reduction),
        "offload/measure_compiled": compiled,
        "offload/measure_device": str(device),
    }


def _measured_path(live: str, reduction: float) -> str:
    """The path a measured variant took. Saved bytes decide whether anything was packed; the hooks' own counts say
    how."""
    if reduction < _NO_REDUCTION:
        return "none"
    return "traced" if live in ("none", "cached") else live


def measure_offload(
    model: nn.Module,
    batch: Any,
    loss_fn: LossFn,
    cfg: OffloadConfig,
    *,
    compile_fn: Optional[CompileFn] = None,
    device: Optional[torch.device] = None,
) -> dict[str, Any]:
    """:func:`compare_with_none` for a plain model and a loss function."""

    def build_step(m: nn.Module) -> Callable[[Any], torch.Tensor]:
        def step(b: Any) -> torch.Tensor:
            return loss_fn(m, b)

        return compile_fn(_fresh_code(step)) if compile_fn is not None else step

    # The device of the batch's first tensor, where none is given.
    tensors = [t for t in runtime.tree_leaves(batch) if isinstance(t, torch.Tensor)]
    dev = torch.device(device) if device is not None else tensors[0].device if tensors else torch.device("cpu")
    return compare_with_none(model, batch, cfg, build_step, dev, compiled=compile_fn is not None)


def _fresh_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its own code object, so Dynamo compiles it afresh."""
    code = fn.__code__
    name = f"{code.co_name}_{next(_VARIANT_IDS)}"
    return types.FunctionType(code.replace(co_name=name, co_qualname=name), fn.__globals__, name, fn.__defaults__,
                              fn.__closure__)
