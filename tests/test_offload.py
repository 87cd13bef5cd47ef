"""Saved-activation strategies on a tiny GPT, eager and really compiled (no mocks).

Tolerances are set from measurements on this model (batch 16 x 32, 2 layers, n_embd 32), with
headroom: gradient relative error vs ``none`` was 2.1e-3 (bf16), 3.7e-2 (fp8) and exactly 0
(checkpointing and the memory budget); saved bytes fell 1.95-2.0x (bf16), 3.7-4.0x (fp8), 3.5-3.8x
(checkpoint per block).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from runner.config.schema import CompileConfig, OffloadConfig, OffloadStrategy, Scope
from runner.models.gpt import GPT
from runner.stack.offload import build_offload, measure_offload

GRAD_TOL = {"bf16": 1e-2, "fp8": 1e-1, "checkpoint": 1e-6}
MIN_REDUCTION = {"bf16": 1.9, "fp8": 3.5, "checkpoint": 3.0}
Batch = tuple[torch.Tensor, torch.Tensor]


@pytest.fixture(autouse=True)
def _reset_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(n_layer=2, n_embd=32, n_head=2, block_size=32)


def batch() -> Batch:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (16, 32), generator=g), torch.randint(0, 256, (16, 32), generator=g)


def loss_fn(model: nn.Module, b: Batch) -> torch.Tensor:
    return F.cross_entropy(model(b[0]).flatten(0, 1), b[1].flatten())


def compiler(backend: Optional[str]) -> Optional[Callable[[Callable[..., Any]], Callable[..., Any]]]:
    if backend is None:
        return None
    return lambda fn: torch.compile(fn, backend=backend)


_MEASURED: dict[tuple[Any, ...], dict[str, Any]] = {}


def measure(strategy: str, backend: Optional[str], **kwargs: Any) -> dict[str, Any]:
    """measure_offload on the tiny GPT; results are shared between tests (compiles are the cost)."""
    key = (strategy, backend, *sorted((k, repr(v)) for k, v in kwargs.items()))
    if key not in _MEASURED:
        cfg = OffloadConfig(strategy=OffloadStrategy(strategy), **kwargs)
        _MEASURED[key] = measure_offload(tiny_gpt(), batch(), loss_fn, cfg, compile_fn=compiler(backend))
    return _MEASURED[key]


@pytest.mark.parametrize("backend", [None, "aot_eager"], ids=["eager", "aot_eager"])
@pytest.mark.parametrize("strategy", ["bf16", "fp8", "checkpoint"])
def test_parity_reduction_and_path(strategy: str, backend: Optional[str]) -> None:
    # exclude=[]: every activation is eligible, so the reduction is the encoding's own.
    r = measure(strategy, backend, exclude=[])
    assert r["offload/reduction_x"] >= MIN_REDUCTION[strategy], r
    assert r["offload/grad_rel_error"] <= GRAD_TOL[strategy], r
    expected_path = {"checkpoint": "checkpoint_per_block"}.get(strategy, "eager_hooks" if backend is None else "traced")
    assert r["offload/measure_path"] == expected_path


def test_default_exclusions_still_reach_the_bf16_target_eagerly() -> None:
    r = measure("bf16", None)  # default: min_bytes=1024, exclude=["head"]
    assert r["offload/reduction_x"] >= 1.9, r


@pytest.mark.parametrize("backend", [None, "aot_eager"], ids=["eager", "aot_eager"])
def test_exclude_keeps_the_head_activations(backend: Optional[str]) -> None:
    kept = measure("bf16", backend)["offload/saved_bytes"]  # default exclude: ["head"]
    packed = measure("bf16", backend, exclude=[])["offload/saved_bytes"]
    head_input = 16 * 32 * 32 * 4  # ln_f output, float32, saved by the head's matmul
    assert kept - packed >= head_input // 2  # kept at 4 bytes/element instead of 2


@pytest.mark.parametrize("backend", [None, "aot_eager"], ids=["eager", "aot_eager"])
def test_min_bytes_larger_than_any_activation_packs_nothing(backend: Optional[str]) -> None:
    r = measure("fp8", backend, min_bytes=1 << 30, exclude=[])
    assert r["offload/reduction_x"] == pytest.approx(1.0, abs=0.01)
    assert r["offload/grad_rel_error"] == 0.0
    assert r["offload/measure_path"] == "none"  # nothing packed: never reported as traced


def test_memory_budget_recomputes_under_compile_and_is_restored() -> None:
    before = torch._functorch.config.activation_memory_budget
    r = measure("checkpoint", "aot_eager", memory_budget=0.5)
    assert r["offload/reduction_x"] >= 1.5 and r["offload/grad_rel_error"] <= 1e-6, r
    assert torch._functorch.config.activation_memory_budget == before


def test_cpu_strategy_on_cpu_warns_once_and_acts_as_none() -> None:
    cfg = OffloadConfig(strategy=OffloadStrategy.cpu)
    with pytest.warns(UserWarning, match="pointless on a cpu device") as record:
        comp = build_offload(cfg, torch.device("cpu"))
    assert len(record) == 1
    model, b = tiny_gpt(), batch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing else may warn
        comp.configure()
        comp.apply(model)
        with comp.step_context():
            loss = loss_fn(model, comp.prepare_batch(b))
        loss.backward()
        r = measure_offload(tiny_gpt(), b, loss_fn, cfg)
    summary = comp.figures()
    assert summary["offload/strategy"] == "cpu" and summary["offload/active"] is False
    assert summary["offload/path"] == "none"
    assert r["offload/reduction_x"] == pytest.approx(1.0, abs=0.01) and r["offload/grad_rel_error"] == 0.0
    assert r["offload/measure_path"] == "none"


def test_integer_saved_tensors_pass_through_when_traced() -> None:
    comp = build_offload(OffloadConfig(strategy=OffloadStrategy.fp8, min_bytes=0, exclude=[]), "cpu")
    model = tiny_gpt()
    comp.apply(model)
    step = torch.compile(lambda b: loss_fn(model, b), backend="aot_eager")
    with comp.step_context():
        loss = step(batch())
    loss.backward()
    counts = comp.codec.counts  # type: ignore[attr-defined]
    # The position ids (int64 arange) are saved for the embedding's backward and must stay exact.
    assert counts["traced_skipped"] > 0 and counts["traced_packed"] > 0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_strategy_flow_compiled_step_no_graph_breaks_no_recompiles() -> None:
    """The order CompileStrategy uses: configure, apply, compile, step_context around forward+loss,
    backward after the context exits; the hooks are reused, so later steps do not recompile."""
    comp = build_offload(OffloadConfig(strategy=OffloadStrategy.bf16), "cpu")
    comp.configure()
    model = tiny_gpt()
    comp.apply(model)
    step = torch.compile(lambda b: loss_fn(model, b), backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for i in range(3):
        with comp.step_context():
            loss = step(comp.prepare_batch(batch()))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
        if i == 0:
            graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
    assert not torch._dynamo.utils.counters["graph_break"]
    assert losses[2] < losses[0]
    summary = comp.figures()
    assert summary["offload/path"] == "traced" and summary["offload/active"] is True
    assert summary["offload/traced_packed"] > 0


def test_whole_step_in_one_graph_runs_inside_the_context() -> None:
    """scope=step_backward: forward, loss and backward are one compiled call inside the context."""
    comp = build_offload(OffloadConfig(strategy=OffloadStrategy.bf16), "cpu")
    model, ref = tiny_gpt(), tiny_gpt()
    comp.apply(model)

    def step(b: Batch) -> torch.Tensor:
        loss = loss_fn(model, b)
        loss.backward()
        return loss.detach()

    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled = torch.compile(step, backend="aot_eager")
        with comp.step_context():
            loss = compiled(batch())
    ref_loss = loss_fn(ref, batch())
    ref_loss.backward()
    assert float(loss) == pytest.approx(float(ref_loss.detach()), rel=1e-5)
    # One graph saves nothing across a boundary: nothing is packed, gradients are exact, and the
    # component says so (path none, not traced).
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    assert not torch._dynamo.utils.counters["graph_break"]
    counts = comp.codec.counts  # type: ignore[attr-defined]
    assert counts["traced_packed"] == 0 and counts["eager_packed"] == 0
    assert comp.figures()["offload/path"] == "none" and comp.figures()["offload/active"] is False


@pytest.mark.slow
def test_inductor_bf16_traced_parity() -> None:
    r = measure("bf16", "inductor", exclude=[])
    assert r["offload/measure_path"] == "traced"
    assert r["offload/reduction_x"] >= 1.9 and r["offload/grad_rel_error"] <= GRAD_TOL["bf16"], r


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("backend", [None, "inductor"], ids=["eager", "inductor"])
def test_cpu_offload_on_cuda_parity(backend: Optional[str]) -> None:
    cuda = torch.device("cuda")
    b = tuple(t.to(cuda) for t in batch())
    cfg = OffloadConfig(strategy=OffloadStrategy.cpu, min_bytes=0, exclude=[])
    r = measure_offload(tiny_gpt(), b, loss_fn, cfg, compile_fn=compiler(backend), device=cuda)
    assert r["offload/measure_path"] == "eager_hooks"  # the hooks offloaded bytes (else the path is none)
    assert r["offload/grad_rel_error"] <= 1e-6, r
    assert r["offload/reduction_x"] >= 2.0, r  # most saved bytes leave the device


# -- measured on the run's path (CompileStack.setup's step 0, runner.stack.offload.on_path) -----------
def _stack_measure(strategy: OffloadStrategy, scope: Scope, backend: str, exclude_head: bool = False,
                   **offload: Any) -> dict[str, Any]:
    import contextlib

    from runner.stack import CompileSettings
    from runner.stack.compiling.plan import resolve_plan
    from runner.stack.offload.on_path import measure_on_run_path
    from runner.training.module import TrainModule

    settings = CompileSettings(compile=CompileConfig(scope=scope, backend=backend),
                               offload=OffloadConfig(strategy=strategy, exclude=["head"] if exclude_head else [],
                                                     **offload))
    module = TrainModule(tiny_gpt(), optimizer=partial(torch.optim.AdamW, lr=1e-3))
    plan = resolve_plan(settings.compile, settings.cudagraphs, None, torch.device("cpu"))
    return measure_on_run_path(module, batch(), torch.device("cpu"), contextlib.nullcontext, settings, plan)


def test_run_path_measure_matches_the_benchmark_method_for_the_same_path() -> None:
    """The stack measures the module's own training_step, compiled as the run compiles it; the
    benchmark's method (a loss function compiled the same way) finds the same bytes."""
    run_path = _stack_measure(OffloadStrategy.bf16, Scope.step, "aot_eager")
    bench = measure("bf16", "aot_eager", exclude=[])
    assert run_path["offload/measure_path"] == bench["offload/measure_path"] == "traced"
    assert run_path["offload/measure_compiled"] is True
    assert run_path["offload/saved_bytes"] == pytest.approx(bench["offload/saved_bytes"], rel=0.02)
    assert run_path["offload/reduction_x"] == pytest.approx(bench["offload/reduction_x"], rel=0.02)


def test_run_path_measure_step_backward_packs_nothing() -> None:
    """Forward, loss and backward in one graph: the bf16 hooks pack nothing, and the run says so."""
    r = _stack_measure(OffloadStrategy.bf16, Scope.step_backward, "aot_eager")
    assert r["offload/measure_path"] == "none"
    assert r["offload/reduction_x"] == pytest.approx(1.0, abs=0.02)


def test_run_path_measure_budget_acts_only_when_compiled() -> None:
    compiled = _stack_measure(OffloadStrategy.checkpoint, Scope.step, "aot_eager", memory_budget=0.5)
    eager = _stack_measure(OffloadStrategy.checkpoint, Scope.none, "aot_eager", memory_budget=0.5)
    assert compiled["offload/measure_path"] == "partitioner_budget" and compiled["offload/reduction_x"] >= 1.5
    assert eager["offload/measure_path"] == "none" and eager["offload/reduction_x"] == pytest.approx(1.0, abs=0.02)
    assert eager["offload/measure_compiled"] is False


def test_run_path_measure_eager_bf16_uses_python_hooks() -> None:
    r = _stack_measure(OffloadStrategy.bf16, Scope.none, "aot_eager")
    assert r["offload/measure_path"] == "eager_hooks" and r["offload/reduction_x"] >= 1.9


@pytest.mark.parametrize("scope", [Scope.none, Scope.step], ids=["eager", "compiled_step"])
def test_exclude_acts_on_the_lightning_module_the_run_applies_to(scope: Scope) -> None:
    """``offload.exclude=[head]`` names the user's model's module; the stack applies the strategy to
    the LightningModule around it (``model.head``), eagerly and with the whole step compiled."""
    kept = _stack_measure(OffloadStrategy.bf16, scope, "aot_eager", exclude_head=True)["offload/saved_bytes"]
    packed = _stack_measure(OffloadStrategy.bf16, scope, "aot_eager")["offload/saved_bytes"]
    head_input = 16 * 32 * 32 * 4  # ln_f output, float32, saved by the head's matmul
    assert kept - packed >= head_input // 2


def test_zero_stride_saved_tensor_round_trips() -> None:
    """An expanded view (stride 0) is packed at its real size and restored with its strides."""
    from runner.stack.offload import hooks

    x = torch.randn(4, 1, 8).expand(4, 6, 8)
    for kind, tol in (("bf16", 1e-2), ("fp8", 1e-1)):
        packed = hooks.encode(x, OffloadStrategy[kind].row.codec)
        y = hooks.decode(packed)
        assert y.shape == x.shape and y.stride() == x.stride()
        torch.testing.assert_close(y.float(), x, rtol=tol, atol=tol)
        payload = packed[1][0]
        assert payload.numel() == 32  # the data once, not 4 x 6 x 8


def test_zero_stride_activation_under_bf16_hooks_trains() -> None:
    """A model that saves an expanded tensor for backward (x * bias.expand) trains under the hooks."""

    class Broadcast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(1, 1, 64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # mul saves the expanded view (stride 0) of exp's output for x's gradient
            return (x * self.w.exp().expand(x.shape[0], x.shape[1], 64)).sum()

    for compiled in (False, True):
        comp = build_offload(OffloadConfig(strategy=OffloadStrategy.bf16, min_bytes=0, exclude=[]), "cpu")
        model, ref = Broadcast(), Broadcast()
        ref.load_state_dict(model.state_dict())
        comp.apply(model)
        fn = torch.compile(model, backend="aot_eager") if compiled else model
        x = torch.randn(8, 16, 64, requires_grad=True)
        with comp.step_context():
            loss = fn(x)
        loss.backward()
        xr = x.detach().clone().requires_grad_()
        ref(xr).backward()
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-2, atol=1e-2)
        assert model.w.grad is not None and torch.isfinite(model.w.grad).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_offload_cuts_peak_cuda_memory_with_unchanged_gradients() -> None:
    """offload=cpu on a GPU: peak ``max_memory_allocated`` over forward and backward falls by at least
    1.5x on an activation-heavy GPT (8 layers, batch 32 x 256), and gradients match to float rounding
    (the tensors go to host memory and come back unchanged; SDPA's efficient-attention backward is not
    deterministic between two runs, so bitwise equality would test the kernel, not the offload)."""
    cuda = torch.device("cuda")
    torch.manual_seed(0)
    base = GPT(n_layer=8, n_embd=256, n_head=4, block_size=256).to(cuda)
    g = torch.Generator().manual_seed(1)
    b = (torch.randint(0, 256, (32, 256), generator=g).to(cuda), torch.randint(0, 256, (32, 256), generator=g).to(cuda))
    peaks, grads = {}, {}
    for name in ("none", "cpu"):
        model = GPT(n_layer=8, n_embd=256, n_head=4, block_size=256).to(cuda)
        model.load_state_dict(base.state_dict())
        comp = build_offload(OffloadConfig(strategy=OffloadStrategy(name), exclude=[]), cuda)
        comp.apply(model)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(cuda)
        start = torch.cuda.memory_allocated(cuda)
        with comp.step_context():
            loss = loss_fn(model, b)
        loss.backward()
        torch.cuda.synchronize()
        peaks[name] = torch.cuda.max_memory_allocated(cuda) - start
        grads[name] = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert peaks["none"] / peaks["cpu"] >= 1.5, peaks
    torch.testing.assert_close(grads["cpu"], grads["none"], rtol=1e-5, atol=1e-6)


def test_measured_path_reads_bytes_first_then_the_hooks_counts() -> None:
    """A compiled graph restored from torch's caches packs without calling the hooks: the bytes say it
    was packed (traced); no reduction means nothing was packed, whatever the hooks saw."""
    from runner.stack.offload.measure import _measured_path

    assert _measured_path("none", 1.95) == "traced"  # cache hit: no pack call, bytes halved
    assert _measured_path("cached", 1.95) == "traced"  # the same, the hit counted by AOTAutograd
    assert _measured_path("cached", 1.0) == "none"
    assert _measured_path("traced", 1.0) == "none"
    assert _measured_path("eager_hooks", 1.97) == "eager_hooks"
    assert _measured_path("partitioner_budget", 2.01) == "partitioner_budget"
