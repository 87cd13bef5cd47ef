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
from runner.stack import CompileSettings, CompileStack, Host
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
    stack.setup(module, Host(device=torch.device("cpu"), optimizers=lambda: [opt]))
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
    from runner.stack.offload_on_path import measure_on_run_path

    module = gpt_module()
    qkv = module.model.blocks[0].attn.qkv.weight.shape  # 2 per model (one per block)
    n_params = sum(p.numel() for p in module.parameters())
    seen: list[tuple[int, int]] = []

    def context() -> contextlib.AbstractContextManager[Any]:  # entered around every measured step
        seen.append((_alive(qkv), _float64_vectors(n_params)))
        return contextlib.nullcontext()

    settings = CompileSettings(compile=CompileConfig(scope=scope, backend="eager"),
                               offload=OffloadConfig(strategy=OffloadStrategy.checkpoint, exclude=[]))
    r = measure_on_run_path(module, gpt_batch(), torch.device("cpu"), context, settings)
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
    from runner.stack.offload_on_path import measure_on_run_path, measurement_plan

    settings = CompileSettings(compile=CompileConfig(scope=Scope.step), cudagraphs=GRAPHS,
                               offload=OffloadConfig(strategy=OffloadStrategy.bf16))
    kwargs = measurement_plan(settings, torch.device("cuda", 0)).kwargs  # resolving needs no CUDA
    assert kwargs.get("mode") is None and "triton.cudagraphs" not in kwargs.get("options", {})
    eager = CompileSettings(compile=CompileConfig(scope=Scope.none),
                            offload=OffloadConfig(strategy=OffloadStrategy.bf16))
    module, batch = gpt_module(dropout=0.1), gpt_batch()
    before = torch.get_rng_state()
    measure_on_run_path(module, batch, torch.device("cpu"), contextlib.nullcontext, eager)
    assert torch.equal(torch.get_rng_state(), before)  # its dropout draws are not the run's


@pytest.fixture(autouse=True)
def _no_force_eager_left() -> Iterator[None]:
    from runner import torch_internals as ti

    yield
    assert ti.current_stance() == "default"
