"""The speedup meter's eager steps stay eager whatever stance another part of the stack sets.

A backend that counts calls of its compiled graphs tells eager steps (no call) from compiled ones.
``dynamic.after_warmup`` sets a compiler stance inside every step after warm-up; it must not turn
the telemetry's ``force_eager`` steps back into compiled ones, or the in-run speedup compares
compiled with compiled.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

from runner.config.schema import (
    AfterWarmup,
    CompileConfig,
    DynamicConfig,
    OptimizerPolicy,
    Scope,
    ShapePolicy,
    TelemetryConfig,
)
from runner.strategy import CompileStrategy
from runner.telemetry.callback import CompileTelemetry
from tests.helpers import tiny_data, tiny_module

CALLS = {"n": 0}


@torch._dynamo.register_backend(name="runner_test_counting")
def _counting(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    def run(*args: Any) -> Any:
        CALLS["n"] += 1
        return gm(*args)

    return run


def test_eager_steps_of_the_speedup_meter_stay_eager_under_a_dynamic_stance() -> None:
    torch._dynamo.reset()
    CALLS["n"] = 0
    steps, pairs = 16, 4
    dynamic = DynamicConfig(policy=ShapePolicy.dynamic, after_warmup=AfterWarmup.fail_on_recompile, warmup_steps=1)
    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step, backend="runner_test_counting",
                                                     optimizer=OptimizerPolicy.none), dynamic=dynamic, device="cpu")
    telemetry = CompileTelemetry(TelemetryConfig(speedup_steps=pairs), heartbeat_s=60)
    trainer = L.Trainer(strategy=strategy, max_steps=steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        callbacks=[telemetry])
    trainer.fit(tiny_module(), tiny_data())
    modes = [p["mode"] for p in telemetry.figures()["perf/step_series"]]
    eager_steps = modes.count("eager") + modes.count("flops")
    assert modes.count("eager") == pairs
    # One compiled call per compiled step (scope=step: forward + loss in one graph).
    assert CALLS["n"] == steps - eager_steps, (CALLS["n"], modes)


def test_cuda_graph_warmup_forces_eager_then_leaves_other_stances_alone() -> None:
    """The component's own stance only covers its warm-up steps (pure stance logic: runs on CPU)."""
    from runner import torch_internals as ti
    from runner.config.schema import CudaGraphMode, CudaGraphsConfig
    from runner.stack.cudagraphs import CudaGraphs

    cfg = CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead, warmup_steps=1)
    component = CudaGraphs(cfg, torch.device("cuda", 0))
    with torch.compiler.set_stance("fail_on_recompile"):
        with component.step_context():
            assert ti.current_stance() == "force_eager"  # warm-up step
        with component.step_context():
            assert ti.current_stance() == "fail_on_recompile"  # not reset to "default"
        with component.optimizer_step_context():
            assert ti.current_stance() == "fail_on_recompile"


def test_cuda_graph_warmup_leaves_the_compiled_optimizer_step_compiled() -> None:
    """The warm-up holds the training step eager, never the optimizer step: compiled from the first
    step, Dynamo creates Adam's state capturable (see ``runner/stack/cudagraphs/trees.py``)."""
    from runner import torch_internals as ti
    from runner.config.schema import CudaGraphMode, CudaGraphsConfig
    from runner.stack.cudagraphs import CudaGraphs

    cfg = CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead, warmup_steps=1)
    component = CudaGraphs(cfg, torch.device("cuda", 0))
    with component.step_context():
        assert ti.current_stance() == "force_eager"  # the warm-up's training step
    with component.optimizer_step_context():
        assert ti.current_stance() == "default"  # the warm-up step's optimizer step is compiled
