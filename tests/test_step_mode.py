"""``StepMode``, the one owner of Dynamo's stance in a fit: its precedence, each part's eager steps, and the
speedup meter's eager steps staying eager under the shape policy's after-warm-up stance.

A backend that counts calls of its compiled graphs tells eager steps (no call) from compiled ones.
``dynamic.after_warmup`` asks for a compiler stance inside every step after warm-up; it must not turn
the telemetry's eager steps back into compiled ones, or the in-run speedup compares compiled with compiled.
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


def test_cuda_graph_warmup_holds_training_steps_eager_then_leaves_the_fits_stance() -> None:
    """The warm-up holds the first training steps eager, never their optimizer steps (a compiled optimizer
    step compiles from the first step, so Dynamo creates Adam's state capturable), and after it the stance
    the fit found is left as it was, not reset to ``default``."""
    from runner.config.schema import CudaGraphMode, CudaGraphsConfig
    from runner.stack import Eager, StepMode
    from runner.stack.cudagraphs import CudaGraphs
    from runner.torch_internals import runtime

    mode = StepMode()
    component = CudaGraphs(CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead, warmup_steps=1),
                           torch.device("cuda", 0), mode)
    with torch.compiler.set_stance("fail_on_recompile"):
        component.configure()  # nothing of it needs CUDA
        try:
            assert mode.eager_because() is Eager.warmup
            with mode.training_step():
                assert runtime.current_stance() == "force_eager"  # the warm-up's training step
            assert runtime.current_stance() == "fail_on_recompile" and not mode.eager  # its optimizer step
            with mode.training_step():
                assert runtime.current_stance() == "fail_on_recompile"  # not reset to "default"
            assert mode.eager_because() is None
        finally:
            component.teardown()
            mode.close()
        assert runtime.current_stance() == "fail_on_recompile"


def test_one_rule_decides_every_step() -> None:
    """Any eager reason makes the step eager and the precedence names it; otherwise the after-warm-up stance
    inside training steps (validation and optimizer steps keep the fit's); the fit's stance comes back at
    the end."""
    from runner.stack import Eager, StepMode
    from runner.torch_internals import runtime

    mode = StepMode()
    mode.after_warmup("fail_on_recompile", from_step=1)
    with mode.training_step():
        assert runtime.current_stance() == "default"  # before the shape policy's warm-up ends
    mode.optimizer_step_done()
    with mode.training_step():
        assert runtime.current_stance() == "fail_on_recompile"
    assert runtime.current_stance() == "default"  # outside the training step (validation, the optimizer step)
    mode.hold(Eager.pair)  # the telemetry's eager batch: the optimizer step too
    assert runtime.current_stance() == "force_eager" and mode.eager
    with mode.training_step():
        assert runtime.current_stance() == "force_eager"  # eager wins over the after-warm-up stance
    mode.eager_next_step(Eager.hold)
    mode.hold(Eager.beside)
    assert mode.eager_because() is Eager.beside  # the first reason in the precedence is the one reported
    mode.release(Eager.beside)
    assert mode.eager_because() is Eager.hold
    with mode.training_step():
        pass
    assert mode.eager_because() is Eager.pair  # the agreement's hold covered one training step
    mode.release(Eager.pair)
    assert runtime.current_stance() == "default" and not mode.eager
    mode.hold(Eager.beside)
    mode.close()  # the fit ends (or raised) while held
    assert runtime.current_stance() == "default"
