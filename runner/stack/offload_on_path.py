"""The saved-activation measurement on the path the run takes (``offload.measure``).

The run's own LightningModule and ``training_step``, on the run's device, compiled as the run's plan
says, each variant (the strategy, and ``none``) on its own copy of the module and a fresh compiler:
what the strategy saves and what it costs in gradient accuracy there, not on a stand-in model
(``runner.stack.offload.measure`` has the method). Above the transforms: it compiles (``compile``),
quiets the step's logging (``deferred_log``) and plans as the run does (``plan``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import lightning as L
import torch

from runner import torch_internals as ti
from runner.config.schema import CompileConfig, CudaGraphsConfig, DynamicConfig, OffloadConfig
from runner.stack.compile import apply_compile
from runner.stack.deferred_log import discard_logs
from runner.stack.dynamic import build_shape_policy
from runner.stack.metrics import metric_methods
from runner.stack.plan import CompilePlan, resolve_plan


def measure_on_run_path(module: L.LightningModule, batch: Any, device: torch.device,
                        context: Callable[[], contextlib.AbstractContextManager[Any]], *,
                        compile_cfg: CompileConfig, dynamic: DynamicConfig, offload: OffloadConfig,
                        cudagraphs: CudaGraphsConfig) -> dict[str, Any]:
    """``offload/*`` figures of ``offload`` against ``none`` for ``module``'s own ``training_step`` on
    ``batch``, compiled as ``compile_cfg`` plans it (without CUDA graphs: a measurement step is not
    replayed), under ``context`` (the trainer's precision). Resets the compiler between variants."""
    from runner.stack.offload.measure import compare_with_none

    shape = build_shape_policy(dynamic)
    plan = resolve_plan(compile_cfg, cudagraphs, shape.dynamic_arg, device, [], cudagraphs_active=False)
    batch = torch.utils._pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, batch)

    def build_step(m: torch.nn.Module) -> Callable[[Any], torch.Tensor]:
        lm: Any = m
        step, _ = apply_compile(lm, lm.training_step, plan)

        def loss(b: Any) -> torch.Tensor:
            with context(), discard_logs(lm, metric_methods(lm)):
                out = step(b, 0)
            return out["loss"] if isinstance(out, Mapping) else out

        return loss

    with _measurement_settings(plan):
        # compare_with_none measures each variant on its own copy of the module, moved to the device.
        return compare_with_none(module, batch, offload, build_step, device, tuple(compile_cfg.block_types),
                                 compiled=plan.compiles)


@contextlib.contextmanager
def _measurement_settings(plan: CompilePlan) -> Iterator[None]:
    """The Dynamo setting the run's step compiles under (backward traced into the step), restored."""
    saved = ti.TorchSettings()
    saved.dynamo("trace_autograd_ops", plan.backward_in_step)
    try:
        yield
    finally:
        saved.restore()
