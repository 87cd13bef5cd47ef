"""CUDA graphs: inactive with one warning on CPU; captured and replayed on a CUDA device (gpu marker)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from runner.config.schema import (
    CompileConfig,
    CudaGraphMode,
    CudaGraphsConfig,
    DynamicConfig,
    OptimizerPolicy,
    Scope,
    ShapePolicy,
)
from runner.stack import StepMode
from runner.stack.compiling.plan import resolve_compile_kwargs
from runner.stack.cudagraphs import CudaGraphs, build_cudagraphs

REQUESTED = CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead)


def test_cpu_degrades_with_one_warning_and_a_flag() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        component = build_cudagraphs(False, REQUESTED, torch.device("cpu"), StepMode())
    messages = [str(w.message) for w in caught if "CUDA" in str(w.message)]
    assert len(messages) == 1 and "not active" in messages[0]
    assert component.figures() == {"cudagraphs/active": False, "cudagraphs/requested": True}


def test_disabled_is_silent() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        component = build_cudagraphs(False, CudaGraphsConfig(), torch.device("cpu"), StepMode())
    assert component.figures()["cudagraphs/active"] is False


def test_the_plan_alone_says_whether_cuda_graphs_are_on() -> None:
    """Asked for and on a CUDA device: decided once (``CompilePlan.cudagraphs``); the component, the optimizer
    policy and the end-of-fit line follow it."""
    from runner.stack.compiling.plan import resolve_optimizers, resolve_plan

    cfg = CompileConfig(scope=Scope.step)
    on = resolve_plan(cfg, REQUESTED, None, torch.device("cuda", 0))
    assert on.cudagraphs and not resolve_plan(cfg, REQUESTED, None, torch.device("cpu")).cudagraphs
    assert not resolve_plan(cfg, CudaGraphsConfig(), None, torch.device("cuda", 0)).cudagraphs
    rmsprop = torch.optim.RMSprop(torch.nn.Linear(2, 2).parameters())  # no fused kernel
    assert resolve_optimizers(on, OptimizerPolicy.auto, [rmsprop], torch.device("cuda", 0)).optimizer \
        is OptimizerPolicy.compiled  # captured with the step, because the plan says CUDA graphs are on
    assert isinstance(build_cudagraphs(on.cudagraphs, REQUESTED, torch.device("cuda", 0), StepMode()), CudaGraphs)


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
    from runner.stack.compiling.plan import resolve_plan

    cfg = CompileConfig(scope=Scope.step, fullgraph=True, optimizer=OptimizerPolicy.compiled)
    plan = resolve_plan(cfg, CudaGraphsConfig(), None, torch.device("cpu"))
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
    from runner.stack import CompileSettings, CompileStack, LightningSide
    from tests.helpers import tiny_module

    stack = CompileStack(CompileSettings(compile=CompileConfig(scope=Scope.step), cudagraphs=REQUESTED))
    module = tiny_module()
    opt = torch.optim.AdamW(module.parameters())
    with pytest.raises(ValueError, match=r"accumulate_grad_batches=2.*overwritten.*169545"):
        stack.setup(module, LightningSide(device=torch.device("cuda", 0), optimizers=lambda: [opt],
                                          accumulate_grad_batches=2))


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

    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step, optimizer=OptimizerPolicy.graphed),
                               cudagraphs=REQUESTED, device="cuda:0")
    trainer = L.Trainer(strategy=strategy, accelerator="cuda", devices=1, max_steps=8, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=0)
    trainer.fit(tiny_module(), tiny_data())
    assert strategy.stack.parts is not None and isinstance(strategy.stack.parts.cudagraphs, CudaGraphs)
    figures = strategy.stack.figures()
    assert figures["cudagraphs/active"] is True
    assert figures["cudagraphs/recordings"] > 0
    # The warm-up steps run eagerly; then CUDA-graph trees warm each compiled function up on its first
    # call (a step of its own), record on the second, and replay from the third on: the forward and the
    # backward record in one step, nothing records again, and every later step replays its own graphs.
    assert figures["cudagraphs/recording_steps"] == 1 and figures["cudagraphs/rerecordings"] == 0
    assert figures["cudagraphs/replay_steps"] == 8 - REQUESTED.warmup_steps - 2
    # compile.optimizer=graphed: the graph-safe step (clipping, the update, zeroing) recorded once in its own graph.
    assert figures["compile/optimizer"] == "graphed" and figures["cudagraphs/optimizer_recordings"] == 1
    assert figures["cudagraphs/static_batch_copies"] == 2 * 8  # inputs and targets, every step
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


# -- the CUDA-graph path beyond fp32 scope=step: validation, blocks with checkpoints, bf16-mixed, resume ------
def _graphs_fit(steps: int, scope: Scope = Scope.step, ckpt_path: str | None = None,
                optimizer: OptimizerPolicy = OptimizerPolicy.auto, dynamic: DynamicConfig | None = None,
                data: object = None, **trainer_kwargs: object) -> tuple:
    import lightning as L

    from runner.config.schema import OffloadConfig, OffloadStrategy
    from runner.strategy import CompileStrategy
    from tests.helpers import tiny_data, tiny_module

    blocks = scope is Scope.blocks
    offload = OffloadConfig(strategy=OffloadStrategy.checkpoint) if blocks else OffloadConfig()
    cfg = CompileConfig(scope=scope, block_types=["Block"] if blocks else [], optimizer=optimizer)
    strategy = CompileStrategy(compile=cfg, cudagraphs=REQUESTED, offload=offload, dynamic=dynamic, device="cuda:0",
                               console=False)
    kwargs: dict = dict(accelerator="cuda", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    kwargs.update(trainer_kwargs)
    trainer = L.Trainer(strategy=strategy, **kwargs)
    trainer.fit(tiny_module(), data or tiny_data(), ckpt_path=ckpt_path)
    return trainer, strategy


@pytest.mark.gpu
def test_validation_batches_replay_instead_of_recording_on_gpu() -> None:
    """scope=blocks (the blocks' checkpoints inside their compiled graphs) under bf16-mixed, validating
    every 4 steps: each validation batch begins a CUDA-graph step, so 6 validation batches record no more
    graphs than 2 (without the mark every batch recorded another graph on top of the training step's)."""
    from torch._dynamo.utils import counters

    recordings = {}
    for batches in (2, 6):
        torch._dynamo.reset()
        counters.clear()
        trainer, strategy = _graphs_fit(12, Scope.blocks, precision="bf16-mixed", val_check_interval=4,
                                        limit_val_batches=batches, num_sanity_val_steps=0)
        figures = strategy.stack.figures()
        assert figures["cudagraphs/active"] is True and figures["offload/checkpointed_blocks"] == 2
        assert counters["inductor"]["cudagraph_skips"] == 0  # checkpoints work under CUDA graphs
        assert torch.isfinite(torch.tensor(float(trainer.callback_metrics["train/loss"])))
        recordings[batches] = figures["cudagraphs/recordings"]
    assert recordings[6] == recordings[2], recordings


@pytest.mark.gpu
def test_compiled_optimizer_is_captured_and_resumes_on_the_device_on_gpu(tmp_path: object) -> None:
    """Asked for (``compile.optimizer=compiled``; ``auto`` takes the fused kernel), the compiled AdamW step
    compiles from the first step (not held eager by the warm-up): Dynamo makes
    it capturable and it runs as a CUDA graph. After a resume its LR tensor is the installed one on the GPU
    (Lightning restored a CPU tensor), so nothing is copied per step and no graph is skipped."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch._dynamo.utils import counters

    trainer, strategy = _graphs_fit(8, optimizer=OptimizerPolicy.compiled, enable_checkpointing=True,
                                    default_root_dir=tmp_path,
                                    callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)])
    group = trainer.optimizers[0].param_groups[0]
    assert strategy.stack.figures()["compile/optimizer"] == "compiled"
    assert group["capturable"] is True and group["lr"].device.type == "cuda"
    assert counters["inductor"]["cudagraph_skips"] == 0
    torch._dynamo.reset()
    counters.clear()
    trainer, strategy = _graphs_fit(14, ckpt_path=str(tmp_path / "last.ckpt"), optimizer=OptimizerPolicy.compiled,
                                    enable_checkpointing=True, default_root_dir=tmp_path)
    group = trainer.optimizers[0].param_groups[0]
    assert group["lr"] is strategy.stack.parts.optimizer_step.installed_lrs[0]
    assert group["lr"].device.type == "cuda" and group["capturable"] is True
    assert all(s["step"].device.type == "cuda" for s in trainer.optimizers[0].state.values())
    figures = strategy.stack.figures()
    assert counters["inductor"]["cudagraph_skips"] == 0 and figures["cudagraphs/replay_steps"] > 0


@pytest.mark.gpu
def test_speedup_is_measured_under_cuda_graphs_on_gpu() -> None:
    """The eager CUDA-graph warm-up steps are held out of the speedup meter's warm-up: the pairs start
    once the step compiled, recorded and replayed, and the report has a speedup."""
    from runner.config.schema import TelemetryConfig
    from runner.telemetry import CompileTelemetry

    telemetry = CompileTelemetry(TelemetryConfig(speedup_steps=3, peak_tflops=100.0))
    _, strategy = _graphs_fit(24, callbacks=[telemetry])
    figures = telemetry.figures()
    assert figures["perf/speedup_status"] == "measured", figures["perf/speedup_status"]
    assert figures["perf/speedup_x"] > 0
    stack = strategy.stack.figures()
    assert stack["compile/optimizer"] == "fused" and stack["cudagraphs/rerecordings"] == 0  # auto's choice


# -- record once, replay every step (docs/compile.md, "Record once, replay every step") ----------------------
def test_auto_steps_fused_outside_the_graph_tree_and_names_the_graphed_step() -> None:
    """Under CUDA graphs ``auto`` takes the fused kernel outside the graph tree (a compiled step would be a tree root
    of its own, copying every gradient on each replay) and names ``compile.optimizer=graphed``, which captures it
    (not picked by auto until measured on a GPU); it compiles the step where there is no fused kernel."""
    from runner.stack.compiling.plan import resolve_optimizer_policy

    model = torch.nn.Linear(4, 4)
    cuda = torch.device("cuda", 0)
    adamw = torch.optim.AdamW(model.parameters())
    policy, reason = resolve_optimizer_policy(OptimizerPolicy.auto, adamw, cuda, True)
    assert policy is OptimizerPolicy.fused and "compile.optimizer=graphed captures it" in reason
    policy, reason = resolve_optimizer_policy(OptimizerPolicy.graphed, adamw, cuda, True)
    assert policy is OptimizerPolicy.graphed and "captured in a CUDA graph" in reason
    policy, reason = resolve_optimizer_policy(OptimizerPolicy.auto, adamw, cuda, True, blocker="a hook")
    assert policy is OptimizerPolicy.fused and "outside the graph tree" in reason and "not captured: a hook" in reason
    policy, _ = resolve_optimizer_policy(OptimizerPolicy.auto, torch.optim.RMSprop(model.parameters()), cuda, True)
    assert policy is OptimizerPolicy.compiled
    policy, _ = resolve_optimizer_policy(OptimizerPolicy.auto, adamw, cuda, False)  # no CUDA graphs: never graphed
    assert policy is OptimizerPolicy.fused


class AddressChurn(Callback):
    """Allocates a tensor of a new size on the device every step and keeps it for one step: the small
    per-step allocations (a flag, a counter, a logged clone) that moved Lightning's batch to new
    addresses in the first GPU run."""

    def __init__(self) -> None:
        self.kept: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer: object, module: object, batch: object, batch_idx: int) -> None:
        self.kept = [torch.empty(1000 + 37 * batch_idx, device="cuda")]


@pytest.mark.gpu
def test_graphs_record_once_with_validation_pairs_and_churn_on_gpu(tmp_path: Path) -> None:
    """After warm-up nothing records again and every compiled step replays its own graphs: with
    validation every 5 steps, the speedup pairs (eager steps between compiled ones), the non-finite guard
    and allocations that move the caching allocator's addresses every step."""
    from runner.config.schema import OnNonFinite, TelemetryConfig
    from runner.reliability.numerics import NonFiniteGuard
    from runner.telemetry import CompileTelemetry

    telemetry = CompileTelemetry(TelemetryConfig(speedup_steps=3, peak_tflops=100.0))
    steps = 30
    guard = NonFiniteGuard(OnNonFinite.stop, tmp_path / "last.ckpt")
    _, strategy = _graphs_fit(steps, callbacks=[telemetry, guard, AddressChurn()], val_check_interval=5,
                              limit_val_batches=2, num_sanity_val_steps=0)
    figures = strategy.stack.figures()
    assert figures["cudagraphs/rerecordings"] == 0, figures
    assert figures["cudagraphs/recording_steps"] == 1, figures
    # Every step but the eager warm-up, the tree's warm-up step, the recording step, and the FLOP step and
    # three eager steps of the speedup pairs replays.
    assert figures["cudagraphs/replay_steps"] == steps - REQUESTED.warmup_steps - 2 - 4, figures
    report = telemetry.figures()
    assert report["perf/recording_steps"] == 1 and report["perf/left_out_steps"] >= 1


@pytest.mark.gpu
@pytest.mark.parametrize("policy", [ShapePolicy.static, ShapePolicy.bucket])
def test_graphs_record_once_per_shape_under_static_and_bucket_on_gpu(policy: ShapePolicy, tmp_path: Path) -> None:
    """Per-document batches of varying length under the policies that keep shapes static: each shape's
    graphs record once (static: one shape; bucket: one per bucket), never again."""
    import random

    from runner.data.text import TextDataModule
    from runner.stack.dynamic.policy import resolve_pad_to

    rng = random.Random(0)
    words = ["def", "class", "return", "import", "self", "value", "for", "while", "yield"]
    corpus = tmp_path / "paragraphs.txt"
    corpus.write_text("\n\n".join(" ".join(rng.choice(words) for _ in range(40))[: rng.randint(18, 33)]
                                   for _ in range(400)))
    dynamic = DynamicConfig(policy=policy, buckets=[16, 32] if policy is ShapePolicy.bucket else [])
    data = TextDataModule(path=str(corpus), batching="documents", seq_len=32, batch_size=2,
                          pad_to=resolve_pad_to(dynamic, 32))
    steps = 24
    _, strategy = _graphs_fit(steps, dynamic=dynamic, data=data)
    figures = strategy.stack.figures()
    assert figures["cudagraphs/rerecordings"] == 0, figures
    shapes = 1 if policy is ShapePolicy.static else 2
    assert figures["cudagraphs/recording_steps"] <= shapes, figures
    assert figures["cudagraphs/replay_steps"] >= steps - REQUESTED.warmup_steps - 2 * shapes, figures


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_the_whole_step_runs_in_cuda_graphs_on_gpu(precision: str) -> None:
    """With runner's settings (``skip_dynamic_graphs`` on) torch before 2.15 left every Triton kernel of the
    static step out of the graphs as "dynamic shape ops", and the outputs of those eager partitions (saved
    activations) re-recorded the backward every step: with the corrected check every partition of the
    forward and the backward is a CUDA graph, recorded once and replayed. Counted where Inductor compiles, so
    the compile caches are off here (a cached graph is not partitioned again)."""
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        _, strategy = _graphs_fit(12, precision=precision)
    figures = strategy.stack.figures()
    assert figures["cudagraphs/graphs_partitioned"] >= 2  # the step's forward and backward
    assert figures["cudagraphs/eager_reasons"] == [], figures["cudagraphs/eager_reasons"]
    assert figures["cudagraphs/partitions_graphed"] == figures["cudagraphs/partitions"] >= 2
    assert figures["cudagraphs/rerecordings"] == 0 and figures["cudagraphs/recording_steps"] == 1
    assert figures["cudagraphs/replay_steps"] == 12 - REQUESTED.warmup_steps - 2
