"""What a saved-activation strategy saves, and what it costs in gradient accuracy.

Definition: **saved-activation bytes** are the bytes a training step's forward and loss leave
allocated when they return only the loss, i.e. what autograd holds for backward, *as stored*
(after packing, with the fp8 scales, without the copies packing freed). Parameters, their
gradients and the batch are allocated before the step and do not count. It is measured from the
allocator, so it covers every path alike (eager hooks, hooks inlined into compiled graphs,
checkpointing, Inductor's own buffers): on CUDA from ``torch.cuda.memory_allocated``; on CPU from
the profiler's memory events (net bytes allocated by the step's ops). The CPU profiler prints two
``USDT: profiler_start/stop`` lines to stderr per measurement; they are harmless.

The gradient error is ``||g - g_none|| / ||g_none||`` over all parameters' gradients concatenated,
on one batch, from identical weights.
"""

from __future__ import annotations

import copy
import gc
import itertools
import time
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Optional, Union

import torch
from torch import nn

from runner.config.schema import OffloadConfig, OffloadStrategy

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


def run_variant(
    model: Union[nn.Module, Callable[[], nn.Module]],
    batch: Any,
    loss_fn: LossFn,
    cfg: OffloadConfig,
    *,
    compile_fn: Optional[CompileFn] = None,
    device: Optional[torch.device] = None,
) -> dict[str, Any]:
    """One check step of ``cfg`` on a fresh copy of ``model``: saved bytes, gradients, loss, path.

    Builds the component, configures it (restored on exit), applies it, compiles the step with
    ``compile_fn`` if given, runs a warm-up step (compiles forward and backward), then measures.
    """
    from runner.offload.component import CheckpointOffload, build_offload

    dev = torch.device(device) if device is not None else _device_of(batch)
    m = (copy.deepcopy(model) if isinstance(model, nn.Module) else model()).to(dev)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cpu-on-CPU warning was already given by the run
        comp = build_offload(cfg, dev)
    comp.configure()
    try:
        comp.apply(m)

        def step(b: Any) -> torch.Tensor:
            return loss_fn(m, b)

        fn = compile_fn(_fresh_code(step)) if compile_fn is not None else step
        b = comp.prepare_batch(batch)
        t0 = time.perf_counter()
        with comp.step_context():
            loss = fn(b)
        loss.backward()
        first_s = time.perf_counter() - t0
        m.zero_grad(set_to_none=True)
        del loss
        gc.collect()
        with saved_bytes_meter(dev) as meter, comp.step_context():
            loss = fn(b)
        loss.backward()
        return {
            "saved_bytes": meter.bytes,
            "grads": flat_grads(m),
            "loss": float(loss.detach()),
            "path": comp.current_path(),
            "first_step_s": first_s,
        }
    finally:
        if isinstance(comp, CheckpointOffload):
            comp.restore()


def measure_offload(
    model: Union[nn.Module, Callable[[], nn.Module]],
    batch: Any,
    loss_fn: LossFn,
    cfg: OffloadConfig,
    *,
    compile_fn: Optional[CompileFn] = None,
    device: Optional[torch.device] = None,
) -> dict[str, Any]:
    """Compare ``cfg`` with ``strategy=none`` on one batch from identical weights.

    Args:
        model: the plain model (deep-copied per variant, never modified) or a factory returning a
            fresh one. Pass it before the strategy's ``apply`` wrapped or hooked it.
        batch: one training batch (already on the device).
        loss_fn: ``loss_fn(model, batch) -> scalar loss``.
        cfg: the offload config to measure.
        compile_fn: e.g. ``lambda f: torch.compile(f, backend="inductor")`` to measure the compiled
            step (two compiles); ``None`` measures eagerly.
        device: where to run (default: the device of the batch's first tensor).

    Returns namespaced figures: ``offload/saved_bytes_none``, ``offload/saved_bytes``,
    ``offload/reduction_x``, ``offload/grad_rel_error``, ``offload/loss_abs_diff``,
    ``offload/measure_path``, ``offload/measure_compiled``.
    """
    if isinstance(model, nn.Module):
        model = copy.deepcopy(model)  # both variants start from the weights as they are now
    base = run_variant(model, batch, loss_fn, replace(cfg, strategy=OffloadStrategy.none),
                       compile_fn=compile_fn, device=device)
    var = run_variant(model, batch, loss_fn, cfg, compile_fn=compile_fn, device=device)
    saved_none, saved = base["saved_bytes"], var["saved_bytes"]
    return {
        "offload/saved_bytes_none": saved_none,
        "offload/saved_bytes": saved,
        "offload/reduction_x": saved_none / saved if saved > 0 else float("inf"),
        "offload/grad_rel_error": rel_error(var["grads"], base["grads"]),
        "offload/loss_abs_diff": abs(var["loss"] - base["loss"]),
        "offload/measure_path": var["path"],
        "offload/measure_compiled": compile_fn is not None,
    }


def _fresh_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its own code object, so Dynamo compiles it afresh.

    Dynamo caches compiled frames per code object and does not guard on compiler settings such as
    the activation memory budget, nor (with inlined nn modules) on which model object a closure
    holds: without a fresh code object, a variant would silently reuse the baseline's graphs.
    """
    code = fn.__code__
    name = f"{code.co_name}_{next(_VARIANT_IDS)}"
    fresh = types.FunctionType(code.replace(co_name=name, co_qualname=name), fn.__globals__, name,
                               fn.__defaults__, fn.__closure__)
    return fresh


def _device_of(batch: Any) -> torch.device:
    for t in torch.utils._pytree.tree_leaves(batch):
        if isinstance(t, torch.Tensor):
            return t.device
    return torch.device("cpu")
