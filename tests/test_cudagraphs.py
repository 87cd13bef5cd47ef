"""CUDA graphs: inactive with one warning on CPU; captured and replayed on a CUDA device (gpu marker)."""

from __future__ import annotations

import warnings

import pytest
import torch

from runner.config.schema import CompileConfig, CudaGraphMode, CudaGraphsConfig, Scope
from runner.stack.cudagraphs import CudaGraphs, build_cudagraphs
from runner.stack.plan import resolve_compile_kwargs

REQUESTED = CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead)


def test_cpu_degrades_with_one_warning_and_a_flag() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        component = build_cudagraphs(REQUESTED, torch.device("cpu"))
    messages = [str(w.message) for w in caught if "CUDA" in str(w.message)]
    assert len(messages) == 1 and "not active" in messages[0]
    assert component.figures() == {"cudagraphs/active": False, "cudagraphs/requested": True}


def test_disabled_is_silent() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        component = build_cudagraphs(CudaGraphsConfig(), torch.device("cpu"))
    assert component.figures()["cudagraphs/active"] is False


def test_reduce_overhead_mode_only_on_cuda() -> None:
    cfg = CompileConfig(scope=Scope.step)
    assert "mode" not in resolve_compile_kwargs(cfg, REQUESTED, None, torch.device("cpu"))
    assert resolve_compile_kwargs(cfg, REQUESTED, None, torch.device("cuda"))["mode"] == "reduce-overhead"


def test_cpu_run_with_cudagraphs_requested_goes_on() -> None:
    with pytest.warns(UserWarning, match="not active"):
        import lightning as L

        from runner.strategy import CompileStrategy
        from tests.helpers import tiny_data, tiny_module

        strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step, backend="eager"), cudagraphs=REQUESTED,
                                   device="cpu")
        trainer = L.Trainer(strategy=strategy, max_steps=3, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
        trainer.fit(tiny_module(), tiny_data())
    assert trainer.global_step == 3
    assert strategy.stack.figures()["cudagraphs/active"] is False


@pytest.mark.gpu
def test_cuda_graphs_capture_and_replay_on_gpu() -> None:
    import lightning as L

    from runner.strategy import CompileStrategy
    from tests.helpers import tiny_data, tiny_module

    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step), cudagraphs=REQUESTED, device="cuda:0")
    trainer = L.Trainer(strategy=strategy, accelerator="cuda", devices=1, max_steps=8, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=0)
    trainer.fit(tiny_module(), tiny_data())
    assert isinstance(strategy.stack.components[-1], CudaGraphs)
    assert strategy.stack.figures()["cudagraphs/active"] is True
    from torch._dynamo.utils import counters

    assert counters["inductor"]["cudagraph_skips"] == 0  # the graphs were really captured


def test_optimizer_state_is_marked_static_once_it_exists() -> None:
    """The CUDA-graph component marks parameters and (after the first step creates it) optimizer state
    static-address; the marking itself is device-independent, so it is checked here on CPU."""
    from tests.helpers import tiny_module

    model = tiny_module()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    component = CudaGraphs(REQUESTED)
    component.apply(model)
    component.bind_optimizers([opt])
    assert all(getattr(p, "_dynamo_static_input_type", None) == "unguarded" for p in model.parameters())
    component.on_step_end(0)
    assert component.static_state_tensors == 0  # no state before the first optimizer step
    sum(p.sum() for p in model.parameters()).backward()
    opt.step()
    component.on_step_end(1)
    state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    assert component.static_state_tensors == len(state) > 0
    assert all(getattr(t, "_dynamo_static_input_type", None) == "unguarded" for t in state)
