"""The CUDA path's decisions, pinned on the CPU wherever the logic runs without a GPU: which blocks
compile under checkpoint wrappers, what the saved-activation measurement keeps alive, which optimizer
path runs on which step, the LR tensor after a resume, step marks on validation, the speedup meter's
warm-up under CUDA graphs, and how often the per-step guards read a value from the device. What only
CUDA can show is in the ``gpu``-marked tests (tests/test_cudagraphs.py, tests/test_gpu_telemetry.py)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
import torch
from torch import nn

from runner.config.schema import CompileConfig, CudaGraphMode, CudaGraphsConfig, OffloadConfig, OffloadStrategy, Scope
from runner.models.gpt import GPT
from runner.stack import CompileSettings, CompileStack, Eager, LightningSide
from runner.training.module import TrainModule

GRAPHS = CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead)


def gpt_module(dropout: float = 0.0) -> TrainModule:
    torch.manual_seed(0)
    return TrainModule(GPT(n_layer=2, n_embd=32, n_head=2, block_size=32, dropout=dropout),
                       optimizer=partial(torch.optim.AdamW, lr=1e-3))


def gpt_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (4, 32), generator=g), torch.randint(0, 256, (4, 32), generator=g)


_GRAPHS_SEEN: list[torch.fx.GraphModule] = []


def _recording_backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    _GRAPHS_SEEN.append(gm)
    return gm.forward


def recording_backend() -> str:
    """A torch.compile backend that keeps every graph Dynamo hands it (and runs it as traced)."""
    name = "runner_test_recording"
    if name not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(_recording_backend, name=name)
    _GRAPHS_SEEN.clear()
    return name


# -- 1. scope=blocks with checkpointing: the compiled unit holds its checkpoint -----------------------
@pytest.mark.parametrize("block_types", [["Block"], []], ids=["block_types", "module_list"])
def test_blocks_compile_their_checkpoint_wrapper_with_the_checkpoint_inside(block_types: list[str]) -> None:
    """Checkpoint wrappers go on first; the one block rule then returns each wrapper, so the compiled
    region contains the checkpoint (traced as a higher-order op) instead of every compiled block being
    called from an eager checkpoint (the pattern of pytorch/pytorch#154306 under CUDA graphs)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    from runner.models.gpt import Block

    settings = CompileSettings(
        compile=CompileConfig(scope=Scope.blocks, backend=recording_backend(), block_types=block_types),
        offload=OffloadConfig(strategy=OffloadStrategy.checkpoint, measure=False))
    module = gpt_module()
    stack = CompileStack(settings, console=False)
    opt = torch.optim.AdamW(module.parameters())
    stack.setup(module, LightningSide(device=torch.device("cpu"), optimizers=lambda: [opt]))
    try:
        compiled = stack.compiled.modules
        assert len(compiled) == 2 and all(isinstance(m, CheckpointWrapper) for m in compiled)
        assert all(isinstance(m._checkpoint_wrapped_module, Block) for m in compiled)
        assert not any("forward" in vars(m) for m in module.modules() if isinstance(m, Block))
        x, y = gpt_batch()
        module.training_step((x, y), 0).backward()
        ops = {str(n.target) for gm in _GRAPHS_SEEN for n in gm.graph.nodes if n.op == "call_function"}
        assert any("checkpoint" in op for op in ops), ops  # the checkpoint is inside the compiled graph
    finally:
        stack.teardown()


# -- 2. the saved-activation measurement: one copy at a time, no float64 gradient vector --------------
def _alive(shape: torch.Size) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is nn.Parameter and o.shape == shape)


def _float64_vectors(numel: int) -> int:
    return sum(1 for o in gc.get_objects()
               if issubclass(type(o), torch.Tensor) and o.dtype == torch.float64 and o.numel() >= numel)


@pytest.mark.parametrize("scope", [Scope.blocks, Scope.step], ids=["blocks", "step"])
def test_measurement_keeps_one_copy_of_the_model_and_no_float64_gradients(scope: Scope) -> None:
    from runner.stack.compiling.plan import resolve_plan
    from runner.stack.offload.on_path import measure_on_run_path

    module = gpt_module()
    qkv = module.model.blocks[0].attn.qkv.weight.shape  # 2 per model (one per block)
    n_params = sum(p.numel() for p in module.parameters())
    seen: list[tuple[int, int]] = []

    def context() -> contextlib.AbstractContextManager[Any]:  # entered around every measured step
        seen.append((_alive(qkv), _float64_vectors(n_params)))
        return contextlib.nullcontext()

    settings = CompileSettings(compile=CompileConfig(scope=scope, backend="eager"),
                               offload=OffloadConfig(strategy=OffloadStrategy.checkpoint, exclude=[]))
    plan = resolve_plan(settings.compile, settings.cudagraphs, None, torch.device("cpu"))
    r = measure_on_run_path(module, gpt_batch(), torch.device("cpu"), context, settings, plan)
    assert len(seen) == 4  # two steps per variant, the none variant first
    assert [alive for alive, _ in seen] == [4, 4, 4, 4]  # the run's module and one copy, never two copies
    assert [vectors for _, vectors in seen] == [0, 0, 0, 0]
    assert r["offload/grad_rel_error"] == 0.0 and r["offload/reduction_x"] > 1.5
    assert _alive(qkv) == 2  # only the run's module is left


def test_host_gradients_keep_their_dtype_and_give_the_float64_error() -> None:
    from runner.stack.offload.measure import HostGrads, flat_grads, rel_error

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2, bias=False))
    model(torch.randn(3, 8)).sum().backward()
    ref_vector = flat_grads(model)
    host = HostGrads(model)
    assert [g.dtype for g in host.grads if g is not None] == [torch.float32] * 3
    model[0].weight.grad.add_(0.01)  # type: ignore[union-attr]
    model[1].weight.grad = None  # a missing gradient counts as zeros
    assert host.rel_error(model) == pytest.approx(rel_error(flat_grads(model), ref_vector), rel=1e-12)


def test_measurement_records_no_cuda_graph_and_leaves_the_random_state_as_it_was() -> None:
    from runner.stack.compiling.plan import resolve_plan
    from runner.stack.offload.on_path import measure_on_run_path

    cuda = torch.device("cuda", 0)
    run_plan = resolve_plan(CompileConfig(scope=Scope.step), GRAPHS, None, cuda)  # resolving needs no CUDA
    assert run_plan.cudagraphs and run_plan.kwargs.get("mode") == "reduce-overhead"
    kwargs = run_plan.without_cudagraphs().kwargs  # what the measurement compiles with
    assert kwargs.get("mode") is None and "triton.cudagraphs" not in kwargs.get("options", {})
    eager = CompileSettings(compile=CompileConfig(scope=Scope.none),
                            offload=OffloadConfig(strategy=OffloadStrategy.bf16))
    module, batch = gpt_module(dropout=0.1), gpt_batch()
    before = torch.get_rng_state()
    plan = resolve_plan(eager.compile, eager.cudagraphs, None, torch.device("cpu"))
    measure_on_run_path(module, batch, torch.device("cpu"), contextlib.nullcontext, eager, plan)
    assert torch.equal(torch.get_rng_state(), before)  # its dropout draws are not the run's


@pytest.fixture(autouse=True)
def _no_force_eager_left() -> Iterator[None]:
    from runner.torch_internals import runtime

    yield
    assert runtime.current_stance() == "default"


# -- 3. memory/peak_gib starts after the strategy's measurement ---------------------------------------
def test_peak_memory_count_restarts_after_the_strategys_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reset at fit start, after the strategy's setup measured on copies of the model (on CUDA the
    peak would otherwise hold the ``none`` variant's forward and backward); the CPU's peak resident set
    cannot be reset, so here the call and its moment are what is checked."""
    import lightning as L

    import runner.telemetry.callback as callback
    from runner.config.schema import TelemetryConfig
    from runner.strategy import CompileStrategy
    from tests.helpers import tiny_data, tiny_module

    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.none),
                               offload=OffloadConfig(strategy=OffloadStrategy.bf16), device="cpu", console=False)
    resets: list[tuple[torch.device, dict[str, Any]]] = []
    monkeypatch.setattr(callback, "reset_memory_peak", lambda d: resets.append((d, dict(strategy.stack.measured))))
    telemetry = callback.CompileTelemetry(TelemetryConfig(speedup_steps=0, peak_tflops=1.0))
    trainer = L.Trainer(strategy=strategy, max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=1,
                        num_sanity_val_steps=0, callbacks=[telemetry])
    trainer.fit(tiny_module(), tiny_data())
    assert len(resets) == 1
    device, measured = resets[0]
    assert device == torch.device("cpu") and measured.get("offload/saved_bytes", 0) > 0  # after the measurement


# -- 4. replay steps: the step's own graphs, read after its backward ------------------------------------
def test_replay_steps_count_the_steps_own_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step counts as replayed when the tree's state right after its backward, in its own generation,
    is a replay and nothing recorded in it; a step that recorded counts as a recording step, and a
    recording of a graph first recorded in an earlier step as a re-recording. (The tree's state needs a
    CUDA device; ``cudagraph_tree_state`` itself is pinned in tests/test_torch_internals.py.)"""
    from runner.stack.cudagraphs import CudaGraphs
    from runner.torch_internals import observation

    states = iter(["NONE", "NONE", "WARMUP", "RECORDING", "EXECUTION", "EXECUTION", "RECORDING", "EXECUTION"])
    monkeypatch.setattr(observation, "cudagraph_tree_state", lambda index: next(states))
    component = CudaGraphs(GRAPHS, torch.device("cuda", 0))
    for step in range(1, 9):
        with component.step_context():
            if step in (4, 7):  # graph "0/0" records at step 4, and again at step 7
                component._on_compile_start(observation.CUDAGRAPH_RECORDING_TRIGGER, "0/0")
                component._on_compile_start(observation.CUDAGRAPH_RECORDING_TRIGGER, "0/0")  # a second partition
        component.after_backward()
        component.on_step_end(step)
    figures = component.figures()
    assert (figures["cudagraphs/recordings"], figures["cudagraphs/rerecordings"]) == (4, 2)
    assert (figures["cudagraphs/recording_steps"], figures["cudagraphs/replay_steps"]) == (2, 3)


# -- 5. validation batches begin a new CUDA-graph step ---------------------------------------------
def _mark_count() -> int:
    from torch._inductor import cudagraph_trees

    return -cudagraph_trees.MarkStepBox.mark_step_counter  # torch counts the marks down from 0


def test_eval_batches_of_a_cuda_graph_fit_mark_a_step() -> None:
    from runner.config.schema import Background, OptimizerPolicy

    # Compiled in the run: on CUDA, compile.background=auto would train the first steps eagerly beside a compile
    # process (Eager.beside), ahead of the CUDA-graph warm-up this test follows.
    settings = CompileSettings(compile=CompileConfig(scope=Scope.blocks, optimizer=OptimizerPolicy.none,
                                                     background=Background.disabled), cudagraphs=GRAPHS)
    module = gpt_module()
    stack = CompileStack(settings, console=False)
    stack.setup(module, LightningSide(device=torch.device("cuda", 0)))  # nothing runs on the device in setup
    try:
        assert stack.step_mode.eager_because() is Eager.warmup  # the first training steps run eagerly
        before = _mark_count()
        with stack.eval_step_context():
            pass
        assert _mark_count() == before + 1
    finally:
        stack.teardown()
    off = CompileStack(CompileSettings(compile=CompileConfig(scope=Scope.none)), console=False)
    before = _mark_count()
    with off.eval_step_context():
        pass
    assert _mark_count() == before and off.step_mode.eager_because() is None


def test_the_strategy_routes_every_eval_batch_of_a_fit_through_the_stack() -> None:
    import lightning as L

    from runner.strategy import CompileStrategy
    from tests.helpers import tiny_data, tiny_module

    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.none), device="cpu", console=False)
    entered: list[int] = []
    own = strategy.stack.eval_step_context

    def counted() -> contextlib.AbstractContextManager[Any]:
        entered.append(1)
        return own()

    strategy.stack.eval_step_context = counted  # type: ignore[method-assign]
    trainer = L.Trainer(strategy=strategy, max_steps=4, val_check_interval=2, limit_val_batches=3,
                        num_sanity_val_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(tiny_module(), tiny_data())
    assert len(entered) == 1 + 2 * 3  # the sanity batch and two validations of three batches


# -- 8. which optimizer path runs on which step, and the report says so -------------------------------
def test_report_counts_the_compiled_optimizers_eager_steps() -> None:
    """The speedup meter's eager and FLOP-counting steps run the compiled optimizer step eagerly: the
    report counts them beside the compiled ones."""
    import lightning as L

    from runner.config.schema import OptimizerPolicy, TelemetryConfig
    from runner.strategy import CompileStrategy
    from runner.telemetry import CompileTelemetry
    from tests.helpers import tiny_data, tiny_module

    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step, backend="eager",
                                                     optimizer=OptimizerPolicy.compiled), device="cpu", console=False)
    telemetry = CompileTelemetry(TelemetryConfig(speedup_steps=2, peak_tflops=1.0))
    trainer = L.Trainer(strategy=strategy, max_steps=10, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        callbacks=[telemetry])
    trainer.fit(tiny_module(), tiny_data())
    modes = [p["mode"] for p in telemetry.figures()["perf/step_series"]]
    forced = modes.count("eager") + modes.count("flops")
    assert forced == 3  # two eager steps of the pairs and the FLOP-counting step
    figures = strategy.figures()
    assert figures["compile/optimizer"] == "compiled"
    assert figures["compile/optimizer_eager_steps"] == forced
    assert figures["compile/optimizer_compiled_steps"] == 10 - forced
    assert "3 of its steps ran eagerly" in figures["compile/optimizer_reason"]


def test_compiled_optimizer_with_a_gradient_scaler_is_refused_before_the_measurement() -> None:
    from runner.config.schema import OptimizerPolicy

    asked: list[int] = []

    def sample() -> tuple[Any, str]:
        asked.append(1)
        return gpt_batch(), ""

    settings = CompileSettings(compile=CompileConfig(scope=Scope.step, optimizer=OptimizerPolicy.compiled),
                               offload=OffloadConfig(strategy=OffloadStrategy.bf16))
    stack = CompileStack(settings, console=False)
    with pytest.raises(ValueError, match=r"compile.optimizer=compiled with a gradient scaler.*compile.optimizer=auto"):
        stack.setup(gpt_module(), LightningSide(device=torch.device("cpu"), sample_batch=sample, scaler=True))
    assert asked == []  # refused before the saved-activation measurement took its batch


# -- 9. after a resume the compiled step's LR tensors are the installed ones, on the device -------------
def test_resume_puts_the_installed_lr_tensors_back(tmp_path: Any) -> None:
    import lightning as L
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint

    from runner.config.schema import OptimizerPolicy
    from runner.strategy import CompileStrategy
    from tests.helpers import tiny_data, tiny_module

    seen: list[tuple[bool, torch.device, float, float]] = []

    class AtTrainStart(Callback):
        def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            stack = trainer.strategy.stack  # type: ignore[attr-defined]
            installed = stack.parts.optimizer_step.installed_lrs
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            expected = trainer.lr_scheduler_configs[0].scheduler.get_last_lr()[0]
            seen.append((lr is installed[0], lr.device, float(lr), float(expected)))

    def fit(steps: int, ckpt: str | None) -> None:
        strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step, backend="eager",
                                                         optimizer=OptimizerPolicy.compiled), device="cpu",
                                   console=False)
        trainer = L.Trainer(strategy=strategy, max_steps=steps, logger=False, enable_progress_bar=False,
                            enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path,
                            callbacks=[AtTrainStart(), ModelCheckpoint(dirpath=tmp_path, save_last=True)])
        trainer.fit(tiny_module(), tiny_data(), ckpt_path=ckpt)

    fit(4, None)
    fit(6, str(tmp_path / "last.ckpt"))
    (fresh, _, _, _), (resumed, device, lr, expected) = seen
    assert fresh and resumed and device == torch.device("cpu")
    assert lr == pytest.approx(expected) and lr != pytest.approx(seen[0][2])  # restored: the LR at step 4


# -- 10. the speedup meter under CUDA graphs ----------------------------------------------------------
def test_meter_waits_for_the_cuda_graph_warm_up_before_it_counts_steady_steps() -> None:
    """The eager warm-up steps compile nothing; counted as quiet compiled steps they ended the meter's
    warm-up before anything compiled, and it concluded "nothing compiled" (no speedup, ever)."""
    from runner.telemetry.speedup import SpeedupMeter

    meter = SpeedupMeter(pairs=2, steady_steps=2, count_flops=False)
    step = 0
    for _ in range(3):  # CUDA-graph warm-up: eager, nothing compiles
        meter.record(step, meter.next_mode(), 30.0, False, held=True)
        step += 1
    meter.record(step, meter.next_mode(), 900.0, True)  # compiles, and warms the graph tree up
    meter.record(step + 1, meter.next_mode(), 80.0, True)  # records the CUDA graphs
    step += 2
    while not meter.done:
        mode = meter.next_mode()
        meter.record(step, mode, 30.0 if mode == "eager" else 10.0, False)
        step += 1
    figures = meter.figures(compile_time_s=1.0)
    assert figures["perf/speedup_status"] == "measured" and figures["perf/speedup_x"] == 3.0


# -- refusals for what cannot work, before anything runs ------------------------------------------------
def test_cpu_offload_exclusion_inside_compiled_code_is_refused(tmp_path: Any) -> None:
    from runner.config import compose, load
    from runner.config.decisions.stack import check_compiled_optimizer_scaler, check_cpu_offload_exclude

    cfg = load(compose(["+recipe=smoke", "offload=cpu"], run_dir=str(tmp_path)))
    assert check_cpu_offload_exclude(cfg) is None  # on a CPU offload=cpu acts as none
    cfg.trainer.accelerator = "cuda"
    message = check_cpu_offload_exclude(cfg)
    assert message is not None and "offload.exclude=[]" in message and "compile.scope=blocks" in message
    cfg.offload.exclude = []
    assert check_cpu_offload_exclude(cfg) is None
    cfg.trainer.precision = "16-mixed"
    cfg.compile.optimizer = type(cfg.compile.optimizer)("compiled")
    assert "trainer.precision=bf16-mixed" in (check_compiled_optimizer_scaler(cfg) or "")

    def refused(scope: Scope, exclude: list[str], block_types: list[str] = ()) -> bool:  # type: ignore[assignment]
        settings = CompileSettings(compile=CompileConfig(scope=scope, block_types=list(block_types)),
                                   offload=OffloadConfig(strategy=OffloadStrategy.cpu, exclude=exclude))
        stack = CompileStack(settings, console=False)
        try:
            stack.setup(gpt_module(), LightningSide(device=torch.device("cuda", 0)))
        except ValueError as e:
            assert "offload=cpu with offload.exclude" in str(e)
            return True
        finally:
            stack.teardown()
        return False

    assert refused(Scope.step, ["head"]) and refused(Scope.model, ["head"])
    assert refused(Scope.blocks, ["blocks.1"])  # inside a compiled block
    assert not refused(Scope.none, ["head"]) and not refused(Scope.blocks, ["head"])  # the head runs eagerly
