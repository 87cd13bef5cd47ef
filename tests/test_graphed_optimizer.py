"""The graph-safe optimizer step (``compile.optimizer=graphed``), run on the CPU through the same code path as on a
GPU minus the capture: ``OptimizerStep.prepare`` installs it, ``optimizer.step(closure)`` runs it as Lightning
calls it, an LR scheduler fills the tensor learning rate in place.

Equal to eager: 50 steps with gradient clipping by norm, weight decay, a warm-up + cosine schedule and one NaN
batch skipped on the device, against a plain eager AdamW + ``clip_grad_norm_`` + scheduler loop that skips the
NaN step itself. Then through a Lightning fit of runner's strategy (clipping taken over from the trainer, the
non-finite guard's skip handed to the step) against the same fit with the fused step and Lightning's clipping.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn

from runner.config.schema import CompileConfig, OnNonFinite, OptimizerPolicy, Scope
from runner.stack.optimizer.graphed import CapturedStep, Clipping, GraphSafeStep
from runner.stack.optimizer.step import OptimizerStep
from runner.training.schedules import warmup_cosine
from tests.tolerance import drift

STEPS = 50
NAN_STEP = 17  # 0-based: the 18th batch is all NaN
CLIP = 0.5
CPU = torch.device("cpu")
# The graph-safe step against torch's AdamW (fused or not) and clip_grad_norm_: the same math in other kernels, so
# the weights round differently every step and the difference feeds the next step's gradients. Per step about 24
# roundings differ (the clip's norm over ~1,000 gradients, the AdamW update, the gradients of a 3-layer MLP), over
# the 49 updates (1.4e-4). Largest difference measured: 1.5e-7 on an AVX-512 EPYC, 1.8e-7 (avx2) and 2.1e-7
# (ATEN_CPU_CAPABILITY=default) on an AVX2 EPYC; the same training without its clip is 0.17 away.
STEPS_TOL = drift(steps=STEPS - 1, depth=24)


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = [(torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)) for _ in range(STEPS)]
    out[NAN_STEP] = (out[NAN_STEP][0] * float("nan"), out[NAN_STEP][1])
    return out


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))


def _optimizer(model: nn.Module) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LRScheduler]:
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.1)
    return opt, warmup_cosine(opt, warmup_steps=5, total_steps=STEPS)


def _eager_reference(model: nn.Module) -> tuple[nn.Module, int]:
    """Plain eager training: AdamW (its default, unfused implementation), clip_grad_norm_, the scheduler every
    step; the NaN step's update skipped by reading the loss. Returns the model and the updates made."""
    opt, sched = _optimizer(model)
    updates = 0
    for x, y in _batches():
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if torch.isfinite(loss):
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            updates += 1
        opt.zero_grad()
        sched.step()
    return model, updates


def _graphed(model: nn.Module, clipping: Clipping | None = None, skip: bool = True) -> tuple[nn.Module,
                                                                                                 OptimizerStep]:
    """The same training through runner's graph-safe step, uncaptured (what runs on the CPU); clipped by norm at
    ``CLIP`` unless ``clipping`` says otherwise."""
    clipping = Clipping(CLIP) if clipping is None else clipping
    opt, sched = _optimizer(model)  # built before the step is installed, as configure_optimizers does
    step = OptimizerStep(OptimizerPolicy.graphed, "test", {}, clipping=clipping, capture=False)
    step.prepare(opt, CPU)
    if skip:
        step.graphed[0].step.skip_on_device(limit=4)
    for x, y in _batches():
        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()  # the gradients accumulate in place: the step zeroes them after its update
            return loss

        opt.step(closure)
        sched.step()
    return model, step


def _max_diff(a: nn.Module, b: nn.Module) -> float:
    return max(float((p - q).detach().abs().max()) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_graph_safe_step_equals_eager_over_50_steps_with_clipping_decay_schedule_and_a_nan_skip() -> None:
    reference, updates = _eager_reference(_model())
    model, step = _graphed(_model())
    assert updates == STEPS - 1
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.isfinite(p).all()
        torch.testing.assert_close(p, q, **STEPS_TOL.kwargs)
    # The tolerance still tells a broken step: the same training without the clip is far outside it.
    unclipped, _ = _graphed(_model(), clipping=Clipping(None))
    assert not all(torch.allclose(p, q, **STEPS_TOL.kwargs)
                   for p, q in zip(unclipped.parameters(), reference.parameters(), strict=True))
    graph_safe = step.graphed[0].step
    assert graph_safe.read_skips() == (1, [NAN_STEP])  # skipped on the device, which step recorded there
    opt = graph_safe.optimizer
    assert all(int(opt.state[p]["step"]) == STEPS - 1 for p in model.parameters())  # the skip left them too
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor)  # the scheduler filled the tensor in place
    assert opt.param_groups[0]["lr"] is step.installed_lrs[0]
    figures = step.figures()
    assert figures["compile/optimizer"] == "graphed"
    assert figures["cudagraphs/optimizer_uncaptured"] == STEPS and figures["cudagraphs/optimizer_replays"] == 0
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())  # zeroed in place
    assert "compile/optimizer_eager_steps" not in figures  # no stance changes what it runs: nothing "ran eagerly"


def test_a_storm_leaves_the_graph_safe_step_and_teardown_unhooks_it() -> None:
    """A recompile storm demotes a compiled optimizer step, never the graph-safe one (it compiles nothing, and
    Lightning's zeroing and clipping are off for it); at teardown the optimizer gets its own step back and no
    longer skips on the step's flag."""
    model, step = _graphed(_model())
    opt = step.graphed[0].step.optimizer
    installed = vars(opt)["step"]
    step.demote(10)
    assert vars(opt)["step"] is installed and step.demoted_at is None
    step.restore()
    assert opt.step is not installed and getattr(opt, "found_inf", None) is None  # the scheduler's wrapper again


def test_what_the_parity_test_would_catch() -> None:
    """Each part of the graph-safe step matters to the comparison above: without the clipping, or without the
    skip (the NaN reaches the weights), the parameters are far from eager's."""
    reference, _ = _eager_reference(_model())
    unclipped, _ = _graphed(_model(), clipping=Clipping())
    assert _max_diff(unclipped, reference) > 1e-3
    unskipped, _ = _graphed(_model(), skip=False)
    assert not all(torch.isfinite(p).all() for p in unskipped.parameters())


def test_clipping_by_value_is_the_foreach_clamp() -> None:
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.1, fused=True)
    reference = copy.deepcopy(model)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=3e-2, weight_decay=0.1, fused=True)
    captured = CapturedStep(GraphSafeStep(opt, Clipping(0.01, "value"), CPU), capture=False)
    x, y = _batches()[0]
    for m in (model, reference):
        nn.functional.mse_loss(m(x), y).backward()
    captured()
    torch.nn.utils.clip_grad_value_(reference.parameters(), 0.01)
    ref_opt.step()
    assert _max_diff(model, reference) == 0.0


def test_a_replaced_gradient_is_bound_again() -> None:
    """A hook that sets ``.grad`` to a new tensor: the step reads the new one (and, captured, records again)."""
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, fused=True)
    captured = CapturedStep(GraphSafeStep(opt, Clipping(), CPU), capture=False)
    x, y = _batches()[0]
    nn.functional.mse_loss(model(x), y).backward()
    captured()
    first = next(model.parameters())
    first.grad = torch.ones_like(first)  # replaced, not accumulated into
    before = first.detach().clone()
    captured()
    assert captured.step.bound() and not torch.equal(first, before)
    assert not first.grad.any()  # the new tensor is the one zeroed


# -- through Lightning and runner's strategy ---------------------------------------------------------------------
class _Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = _model()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> dict[str, object]:
        opt, sched = _optimizer(self)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _fit(policy: OptimizerPolicy, tmp_path: Path, callbacks: Callable[[], list[L.Callback]] = list,
         nan: bool = False) -> tuple[_Regression, L.Trainer]:
    from torch.utils.data import DataLoader

    from runner.strategy import CompileStrategy

    batches = _batches() if nan else [b for i, b in enumerate(_batches()) if i != NAN_STEP]
    module = _Regression()
    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step, backend="eager", optimizer=policy))
    trainer = L.Trainer(strategy=strategy, accelerator="cpu", devices=1, max_steps=len(batches), logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, gradient_clip_val=CLIP, callbacks=callbacks(),
                        default_root_dir=tmp_path)
    trainer.fit(module, DataLoader(batches, batch_size=None))  # type: ignore[arg-type]
    return module, trainer


def test_a_lightning_fit_takes_clipping_over_and_matches_the_fused_step(tmp_path: Path) -> None:
    """``compile.optimizer=graphed`` in a fit of runner's strategy: the trainer's ``gradient_clip_val`` runs inside
    the graph-safe step (Lightning's own clipping made a no-op) and the weights equal those of the fused step with
    Lightning's clipping; the summary says what ran."""
    fused, _ = _fit(OptimizerPolicy.fused, tmp_path / "fused")
    graphed, trainer = _fit(OptimizerPolicy.graphed, tmp_path / "graphed")
    torch.testing.assert_close(list(graphed.parameters()), list(fused.parameters()), **STEPS_TOL.kwargs)
    strategy = trainer.strategy
    figures = strategy.stack.figures()  # type: ignore[attr-defined]
    assert figures["compile/optimizer"] == "graphed" and "uncaptured: CUDA graphs are off" in \
        figures["compile/optimizer_reason"]
    assert figures["cudagraphs/optimizer_uncaptured"] == STEPS - 1
    assert "configure_gradient_clipping" not in vars(graphed) and "optimizer_zero_grad" not in vars(graphed)


def test_the_nonfinite_guard_hands_its_skip_to_the_graph_safe_step(tmp_path: Path) -> None:
    """``reliability.on_nonfinite=skip`` under the graph-safe step: the NaN batch's update is skipped on the device
    (found from the gradients' norm, no read of the loss before each update), the guard reads and logs it, and the
    weights equal those of the fused step, whose update the guard skips from the host (today's path)."""
    from runner.reliability import NonFiniteGuard

    def guard() -> NonFiniteGuard:
        return NonFiniteGuard(OnNonFinite.skip, tmp_path / "last.ckpt", check_every=1)

    on_device, host = guard(), guard()
    graphed, _ = _fit(OptimizerPolicy.graphed, tmp_path / "graphed", callbacks=lambda: [on_device], nan=True)
    fused, _ = _fit(OptimizerPolicy.fused, tmp_path / "fused", callbacks=lambda: [host], nan=True)
    assert on_device._device is not None and host._device is None  # handed over only to the graph-safe step
    assert on_device.skipped == host.skipped == [NAN_STEP + 1]
    assert all(torch.isfinite(p).all() for p in graphed.parameters())
    torch.testing.assert_close(list(graphed.parameters()), list(fused.parameters()), **STEPS_TOL.kwargs)


def test_past_max_skipped_steps_the_guard_stops_with_the_last_good_state(tmp_path: Path) -> None:
    """The device's record read past ``reliability.max_skipped_steps``: the run stops with the step named, and the
    state saved then never took a non-finite update."""
    from runner.reliability import NonFiniteGuard
    from runner.reliability.numerics import NonFiniteLossError

    guard = NonFiniteGuard(OnNonFinite.skip, tmp_path / "last.ckpt", max_skipped_steps=0, check_every=1)
    with pytest.raises(NonFiniteLossError, match=rf"non-finite gradients at step {NAN_STEP + 1}.*on the device"):
        _fit(OptimizerPolicy.graphed, tmp_path / "stop", callbacks=lambda: [guard], nan=True)
    saved = torch.load(tmp_path / "last.ckpt", weights_only=False)
    assert all(torch.isfinite(t).all() for t in saved["state_dict"].values())
    assert saved["global_step"] == NAN_STEP + 1  # read before the next update: the skipped step was the last


@pytest.mark.parametrize("policy", [OptimizerPolicy.graphed])
def test_an_lbfgs_or_a_hook_falls_back_with_the_reason(policy: OptimizerPolicy) -> None:
    """What cannot be captured keeps today's path, and the plan says why: LBFGS (its step calls the closure many
    times), a module's own ``on_before_optimizer_step`` (it may read gradients)."""
    from runner.stack.compiling.plan import StepFacts, capture_blocker, resolve_optimizer_policy

    model = _model()
    lbfgs = torch.optim.LBFGS(model.parameters())
    assert "LBFGS" in (capture_blocker([lbfgs], CPU, StepFacts()) or "")
    adamw = torch.optim.AdamW(model.parameters())
    hook = capture_blocker([adamw], CPU, StepFacts(gradient_hooks=("Mine.on_before_optimizer_step",)))
    assert hook is not None and "Mine.on_before_optimizer_step" in hook
    chosen, reason = resolve_optimizer_policy(policy, adamw, CPU, False, blocker=hook)
    assert chosen is OptimizerPolicy.fused and "compile.optimizer=graphed cannot run" in reason
    assert capture_blocker([adamw], CPU, StepFacts()) is None


# -- the compiled optimizer step: a schedule never recompiles ------------------------------------------------------
def _graphs_compiled_while_scheduling(tensor_lr: bool) -> tuple[int, list[float]]:
    """Graphs Dynamo compiled for the compiled AdamW step after its first step, over five more steps of a warm-up
    schedule (the learning rate changes every step); and the learning rates seen."""
    from runner.torch_internals import observation

    model = _model()
    opt, sched = _optimizer(model)
    step = OptimizerStep(OptimizerPolicy.compiled, "test", {"backend": "eager"})
    if tensor_lr:
        step.prepare(opt, CPU)  # installs the tensor learning rate and the compiled step
    else:  # the same compiled class step over a Python-float learning rate
        compiled = torch.compile(type(opt).step.__get__(opt), backend="eager")
        opt.step = lambda closure=None: compiled()  # type: ignore[method-assign]
    x, y = _batches()[0]
    lrs: list[float] = []
    after_first = 0
    for i in range(6):
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        lrs.append(float(opt.param_groups[0]["lr"]))
        if i == 0:
            after_first = observation.counter(observation.counters_snapshot(), "unique_graphs")
    return observation.counter(observation.counters_snapshot(), "unique_graphs") - after_first, lrs


def test_the_compiled_optimizer_step_never_recompiles_as_the_learning_rate_changes() -> None:
    new_graphs, lrs = _graphs_compiled_while_scheduling(tensor_lr=True)
    assert len(set(lrs)) >= 5  # the warm-up changed the learning rate at the steps the count covers
    assert new_graphs == 0
    torch._dynamo.reset()
    # What the tensor learning rate prevents: over a Python float the same schedule compiles again.
    new_graphs, _ = _graphs_compiled_while_scheduling(tensor_lr=False)
    assert new_graphs > 0


def test_sgd_with_momentum_skipping_its_first_step_equals_eager() -> None:
    """A NaN in the very first batch under fused SGD with momentum (and Nesterov): the skipped first step leaves
    the momentum buffers at the zero the step primed them with, and 10 steps equal eager SGD that skipped it."""
    batches = _batches()[:10]
    batches[0] = (batches[0][0] * float("nan"), batches[0][1])

    def make(model: nn.Module) -> torch.optim.SGD:
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)

    reference, model = _model(), _model()
    ref_opt = make(reference)
    for x, y in batches:
        loss = nn.functional.mse_loss(reference(x), y)
        loss.backward()
        if torch.isfinite(loss):
            ref_opt.step()
        ref_opt.zero_grad()
    opt = make(model)
    step = OptimizerStep(OptimizerPolicy.graphed, "test", {}, capture=False)
    step.prepare(opt, CPU)
    step.graphed[0].step.skip_on_device(limit=1)
    for x, y in batches:
        opt.step(lambda x=x, y=y: nn.functional.mse_loss(model(x), y).backward())
    assert step.graphed[0].step.read_skips() == (1, [0])
    torch.testing.assert_close(list(model.parameters()), list(reference.parameters()),
                               **drift(steps=len(batches), depth=24).kwargs)  # as STEPS_TOL, over 10 steps


def test_gradient_accumulation_is_correct_uncaptured(tmp_path: Path) -> None:
    """``trainer.accumulate_grad_batches=2`` under the graph-safe step: the gradients of both micro-batches
    accumulate in place (Lightning's zero_grad is a no-op, the step zeroes after its update), as with the fused
    step and Lightning's own zeroing. Captured, accumulation never runs: CUDA graphs refuse it (reduce_overhead)
    or stay off (auto)."""
    from runner.config.decisions.stack import CudaGraphsFacts, cudagraphs_decision
    from runner.config.schema import CudaGraphMode, ShapePolicy

    def fit(policy: OptimizerPolicy) -> nn.Module:
        from torch.utils.data import DataLoader

        from runner.strategy import CompileStrategy

        module = _Regression()
        trainer = L.Trainer(strategy=CompileStrategy(compile=CompileConfig(scope=Scope.step, backend="eager",
                                                                           optimizer=policy)),
                            accelerator="cpu", devices=1, max_steps=10, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                            accumulate_grad_batches=2, gradient_clip_val=CLIP, default_root_dir=tmp_path)
        batches = [b for i, b in enumerate(_batches()) if i != NAN_STEP]
        trainer.fit(module, DataLoader(batches, batch_size=None))  # type: ignore[arg-type]
        return module

    graphed, fused = fit(OptimizerPolicy.graphed), fit(OptimizerPolicy.fused)
    torch.testing.assert_close(list(graphed.parameters()), list(fused.parameters()),
                               **drift(steps=10, depth=24).kwargs)  # as STEPS_TOL, over the 10 updates
    accumulating = CudaGraphsFacts(on_cuda=True, shape=ShapePolicy.static, accumulate_grad_batches=2)
    assert not cudagraphs_decision(CudaGraphMode.auto, accumulating).on
