"""The saved-activation measurement on the path the run takes (``offload.measure``): step 0 of ``CompileStack.setup``,
for every user of runner's strategies."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import lightning as L
import torch

from runner.lightning_step.deferred_log import discard_logs, metric_methods
from runner.stack.compiling.compile import CompiledModules, apply_compile
from runner.stack.compiling.plan import CompilePlan
from runner.stack.settings import CompileSettings, LightningSide
from runner.torch_internals import runtime


def measure_saved_activations(module: L.LightningModule, lightning: LightningSide, settings: CompileSettings,
                              plan: CompilePlan) -> dict[str, Any]:
    """``offload/*`` figures of the offload strategy against ``none`` (empty when there is nothing to
    measure; ``offload/measure_skipped`` when it cannot run here), compiled as the run's ``plan`` says."""
    offload = settings.offload
    if not offload.strategy.row.active or not offload.measure:
        return {}
    if not module.automatic_optimization:
        return {"offload/measure_skipped": "manual optimization: the step needs the trainer"}
    if lightning.shard is not None:
        return {"offload/measure_skipped": "sharded strategy: each variant would copy the whole unsharded model onto "
                                           "every rank"}
    batch, why = lightning.sample_batch() if lightning.sample_batch else (None, "no sample batch was given")
    if batch is None:
        return {"offload/measure_skipped": why}
    return measure_on_run_path(module, batch, lightning.device, lightning.step_context, settings, plan)


def measure_on_run_path(module: L.LightningModule, batch: Any, device: torch.device,
                        context: Callable[[], contextlib.AbstractContextManager[Any]],
                        settings: CompileSettings, run_plan: CompilePlan) -> dict[str, Any]:
    """``offload/*`` figures for ``module``'s own ``training_step`` on ``batch``, compiled as the run plans
    it (without CUDA graphs: a measurement step is not replayed), under ``context`` (the trainer's precision)."""
    from runner.stack.offload.measure import compare_with_none

    s = settings
    plan = run_plan.without_cudagraphs()
    batch = runtime.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, batch)

    def build_step(m: torch.nn.Module) -> Callable[[Any], torch.Tensor]:
        lm: Any = m
        # Its own CompiledModules: a list shared by both variants would keep the first copy's blocks alive.
        step = apply_compile(lm, lm.training_step, plan, CompiledModules())

        def loss(b: Any) -> torch.Tensor:
            with context(), discard_logs(lm, metric_methods(lm)):
                out = step(b, 0)
            return out["loss"] if isinstance(out, Mapping) else out

        return loss

    snapshot = runtime.code_snapshot()

    def forget() -> None:  # between variants: what the measurement compiled, and nothing else
        runtime.forget_codes(runtime.codes_compiled_since(snapshot))

    # The random state the run continues from, restored (the measurement's dropout draws are not the run's);
    # Dynamo's settings are the run's own, set before this.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        # compare_with_none measures each variant on its own copy of the module, moved to the device.
        return compare_with_none(module, batch, s.offload, build_step, device, tuple(s.compile.block_types),
                                 compiled=plan.compiles, fresh_compiler=forget)
