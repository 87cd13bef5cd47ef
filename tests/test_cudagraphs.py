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


def test_cudagraphs_with_inductor_options_become_an_option_not_a_mode() -> None:
    """torch.compile takes a mode or options, not both ("Either mode or options can be specified")."""
    cfg = CompileConfig(scope=Scope.step, options={"epilogue_fusion": False})
    kwargs = resolve_compile_kwargs(cfg, REQUESTED, None, torch.device("cuda"))
    assert "mode" not in kwargs
    assert kwargs["options"] == {"epilogue_fusion": False, "triton.cudagraphs": True}
    assert "triton.cudagraphs" not in resolve_compile_kwargs(cfg, CudaGraphsConfig(), None,
                                                             torch.device("cuda"))["options"]


def test_max_autotune_never_turns_cuda_graphs_on_behind_the_component() -> None:
    cfg = CompileConfig(scope=Scope.step, mode="max-autotune")
    off = resolve_compile_kwargs(cfg, CudaGraphsConfig(), None, torch.device("cuda"))
    assert off["mode"] == "max-autotune-no-cudagraphs"
    assert resolve_compile_kwargs(cfg, REQUESTED, None, torch.device("cuda"))["mode"] == "max-autotune"


def test_compiled_optimizer_step_never_takes_fullgraph() -> None:
    """Optimizer.step's _use_grad breaks the graph on purpose: fullgraph=true is for the model only."""
    from runner.config.schema import OptimizerPolicy
    from runner.stack.plan import resolve_plan

    cfg = CompileConfig(scope=Scope.step, fullgraph=True, optimizer=OptimizerPolicy.compiled)
    plan = resolve_plan(cfg, CudaGraphsConfig(), None, torch.device("cpu"), [], cudagraphs_active=False)
    assert plan.kwargs["fullgraph"] is True and "fullgraph" not in plan.optimizer_kwargs


def test_compiled_optimizer_under_fullgraph_runs() -> None:
    """End to end on CPU (eager backend): compile.fullgraph=true with the compiled optimizer step trains."""
    import lightning as L

    from runner.config.schema import OptimizerPolicy
    from runner.strategy import CompileStrategy
    from tests.helpers import tiny_data, tiny_module

    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step, backend="eager", fullgraph=True,
                                                     optimizer=OptimizerPolicy.compiled), device="cpu")
    trainer = L.Trainer(strategy=strategy, max_steps=3, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(tiny_module(), tiny_data())
    assert trainer.global_step == 3


def test_gradient_accumulation_under_cuda_graphs_is_refused_by_the_stack() -> None:
    """Direct CompileStrategy users get the same refusal as the config check (no CUDA needed to refuse)."""
    from runner.stack import CompileSettings, CompileStack, Host
    from tests.helpers import tiny_module

    stack = CompileStack(CompileSettings(compile=CompileConfig(scope=Scope.step), cudagraphs=REQUESTED))
    module = tiny_module()
    opt = torch.optim.AdamW(module.parameters())
    with pytest.raises(ValueError, match=r"accumulate_grad_batches=2.*overwritten.*169545"):
        stack.setup(module, Host(device=torch.device("cuda", 0), optimizers=lambda: [opt], accumulate_grad_batches=2))


def test_recordings_and_replays_decide_active() -> None:
    """``cudagraphs/active`` comes from what happened: no recording, no replay -> inactive."""
    component = CudaGraphs(REQUESTED, torch.device("cuda", 0))
    assert component.figures()["cudagraphs/active"] is False  # requested, nothing recorded
    component._on_compile_start("CUDAGRAPH_RECORDING", "0/0")
    component._on_compile_start("DYNAMO", "0/1")
    assert component.recordings == 1
    assert component.figures()["cudagraphs/active"] is False  # recorded, never replayed
    component.replay_steps = 3
    assert component.figures()["cudagraphs/active"] is True


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
    assert strategy.stack.parts is not None and isinstance(strategy.stack.parts.cudagraphs, CudaGraphs)
    figures = strategy.stack.figures()
    assert figures["cudagraphs/active"] is True
    assert figures["cudagraphs/recordings"] > 0
    # warm-up steps run eagerly, then one step records, and every later step replays
    assert figures["cudagraphs/replay_steps"] >= 8 - REQUESTED.warmup_steps - 1
    from torch._dynamo.utils import counters

    assert counters["inductor"]["cudagraph_skips"] == 0  # the graphs were really captured


@pytest.mark.gpu
def test_cuda_graphs_loss_parity_with_eager_on_gpu() -> None:
    """Same seed, same batches: CUDA-graph steps give eager's losses (fp32, Inductor's rounding)."""
    import lightning as L

    from runner.strategy import CompileStrategy
    from tests.helpers import LossRecorder, tiny_data, tiny_module

    losses = {}
    for name, scope, graphs in (("eager", Scope.none, CudaGraphsConfig()), ("graphs", Scope.step, REQUESTED)):
        rec = LossRecorder()
        strategy = CompileStrategy(compile=CompileConfig(scope=scope), cudagraphs=graphs, device="cuda:0")
        trainer = L.Trainer(strategy=strategy, accelerator="cuda", devices=1, max_steps=12, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=0,
                            callbacks=[rec])
        trainer.fit(tiny_module(), tiny_data())
        losses[name] = rec.losses
    torch.testing.assert_close(torch.tensor(losses["graphs"]), torch.tensor(losses["eager"]), rtol=2e-3, atol=2e-3)


@pytest.mark.gpu
def test_gradient_accumulation_with_cuda_graphs_is_refused_on_gpu() -> None:
    import lightning as L

    from runner.strategy import CompileStrategy
    from tests.helpers import tiny_data, tiny_module

    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step), cudagraphs=REQUESTED, device="cuda:0")
    trainer = L.Trainer(strategy=strategy, accelerator="cuda", devices=1, max_steps=4, logger=False,
                        accumulate_grad_batches=2, enable_checkpointing=False, enable_progress_bar=False,
                        limit_val_batches=0)
    with pytest.raises(ValueError, match="accumulate_grad_batches=2"):
        trainer.fit(tiny_module(), tiny_data())


def test_optimizer_state_is_marked_static_once_it_exists() -> None:
    """The CUDA-graph component marks parameters and (after the first step creates it) optimizer state
    static-address; the marking itself is device-independent, so it is checked here on CPU."""
    from tests.helpers import tiny_module

    model = tiny_module()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    component = CudaGraphs(REQUESTED, torch.device("cuda", 0))
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
