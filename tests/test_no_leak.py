"""Nothing leaks between runs in one process (Hydra multirun jobs share it).

Two differently configured fits run one after the other, in both orders. Each fit records, at its
first training batch, every process-wide torch setting the compile stack and telemetry may change.
The second fit must see exactly what it sees when it runs first (torch's defaults plus its own
settings), and after each fit the process is back to what it was before.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from runner.config.schema import (
    CompileConfig,
    DynamicConfig,
    OffloadConfig,
    OffloadStrategy,
    OnError,
    Scope,
    TelemetryConfig,
)
from runner.strategy import CompileStrategy
from runner.telemetry import CompileTelemetry
from runner.torch_internals import settings
from tests.helpers import tiny_data, tiny_module


def torch_settings() -> dict[str, Any]:
    """Every process-wide setting runner's stack or telemetry may touch, read from torch itself."""
    from torch._C._dynamo.eval_frame import set_guard_complete_hook

    from runner.torch_internals import observation, runtime

    hook = set_guard_complete_hook(None)
    set_guard_complete_hook(hook)
    d, i, f = torch._dynamo.config, torch._inductor.config, torch._functorch.config
    return {
        "recompile_limit": d.recompile_limit,
        "specialize_float": d.specialize_float,
        "automatic_dynamic_shapes": d.automatic_dynamic_shapes,
        "enable_compiler_collectives": d.enable_compiler_collectives,
        "suppress_errors": d.suppress_errors,
        "trace_autograd_ops": d.trace_autograd_ops,
        "fail_on_recompile_limit_hit": d.fail_on_recompile_limit_hit,
        "cudagraph_skip_dynamic_graphs": i.triton.cudagraph_skip_dynamic_graphs,
        "activation_memory_budget": f.activation_memory_budget,
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
        "guard_collectives": hook is not None,
        "compilation_metrics_limit": observation.compilation_metrics_limit(),
        "stance": runtime.current_stance(),
    }


class Probe(Callback):
    """Records the settings as the first training batch starts (after the stack is applied)."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] | None = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self.seen is None:
            self.seen = torch_settings()


def fit(name: str, cache_dir: Path) -> dict[str, Any]:
    """One short fit (eager backend: plumbing, not codegen) with config ``a`` or ``b``; what it saw."""
    if name == "a":  # everything that sets something process-wide, away from its default
        strategy = CompileStrategy(
            compile=CompileConfig(scope=Scope.step_backward, backend="aot_eager", on_error=OnError["eager"],
                                  cache_dir=str(cache_dir)),
            dynamic=DynamicConfig(recompile_limit=3, specialize_float=False),
            offload=OffloadConfig(strategy=OffloadStrategy.checkpoint, memory_budget=0.3),
            device="cpu",
        )
    else:  # the defaults
        strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step, backend="eager"), device="cpu")
    probe = Probe()
    trainer = L.Trainer(strategy=strategy, max_steps=3, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        callbacks=[probe, CompileTelemetry(TelemetryConfig(speedup_steps=0))])
    trainer.fit(tiny_module(), tiny_data())
    assert probe.seen is not None
    return probe.seen


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_second_fit_sees_defaults_plus_its_own_settings(order: tuple[str, str], tmp_path: Path) -> None:
    before = torch_settings()
    alone = {}
    for name in order[::-1]:  # what each configuration sees when it starts from the state before
        alone[name] = fit(name, tmp_path)
        assert torch_settings() == before, f"fit {name} left a process-wide setting changed"
    first = fit(order[0], tmp_path)
    assert torch_settings() == before, "the first fit left a process-wide setting changed"
    second = fit(order[1], tmp_path)
    assert torch_settings() == before
    assert first == alone[order[0]]
    assert second == alone[order[1]], f"fit {order[1]} saw settings left by fit {order[0]}"
    # The two configurations really differ in what they set (the test would be vacuous otherwise).
    assert alone["a"]["trace_autograd_ops"] and not alone["b"]["trace_autograd_ops"]
    assert alone["a"]["activation_memory_budget"] == pytest.approx(0.3)
    assert alone["a"]["TORCHINDUCTOR_CACHE_DIR"] == settings.machine_cache_dir(str(tmp_path))
    assert alone["a"]["recompile_limit"] == 3 and not alone["a"]["specialize_float"]
    assert alone["a"]["suppress_errors"] and not alone["a"]["fail_on_recompile_limit_hit"]
