"""``cudagraphs=auto``, the default: one decision function (``runner.config.decisions.stack.cudagraphs_decision``)
with its reasons, asked for each case as a plain function of plain values, then through the plan, the config check and a
CPU fit, where nothing changes: auto is off with the reason "no CUDA device".
"""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning as L
import pytest
import torch

from runner.config import compose, load
from runner.config.checks.validate import notes, validate
from runner.config.decisions.stack import MIN_FREE_MEMORY, CudaGraphsFacts, cudagraphs_decision
from runner.config.schema import CompileConfig, CudaGraphMode, CudaGraphsConfig, DynamicConfig, Scope
from runner.config.schema.options import OffloadStrategy, ShapePolicy

AUTO = CudaGraphMode.auto
ELIGIBLE = CudaGraphsFacts(on_cuda=True, shape=ShapePolicy.static, free_memory=0.9)
"""A step auto captures: CUDA, Inductor, static shapes, nothing in the way, most of the memory free."""


def _replace(**changes: object) -> CudaGraphsFacts:
    import dataclasses

    return dataclasses.replace(ELIGIBLE, **changes)  # type: ignore[arg-type]


def test_auto_is_on_for_an_eligible_step_on_cuda() -> None:
    decision = cudagraphs_decision(AUTO, ELIGIBLE)
    assert decision.on and "eligible" in decision.reason and "90% of the device's memory free" in decision.reason
    bucketed = cudagraphs_decision(AUTO, _replace(shape=ShapePolicy.bucket))
    assert bucketed.on and "dynamic.policy=bucket" in bucketed.reason
    # A saved-activation strategy a graph can capture (traced hooks, recomputation) keeps it on.
    for strategy in (OffloadStrategy.bf16, OffloadStrategy.checkpoint):
        assert cudagraphs_decision(AUTO, _replace(offload=strategy)).on
    assert cudagraphs_decision(AUTO, _replace(free_memory=None)).on  # not measured: nothing against it


@pytest.mark.parametrize(("changes", "reason"), [
    ({"on_cuda": False}, "no CUDA device"),
    ({"backend": "aot_eager"}, "compile.backend=aot_eager"),
    ({"compiles": False}, "nothing is compiled"),
    ({"compile_mode": "max-autotune"}, "compile.mode=max-autotune"),
    ({"shape": ShapePolicy.automatic}, "dynamic.policy=automatic: shapes may vary"),
    ({"shape": ShapePolicy.dynamic}, "dynamic.policy=dynamic: shapes may vary"),
    ({"shape": ShapePolicy.unbacked}, "dynamic.policy=unbacked: shapes may vary"),
    ({"offload": OffloadStrategy.cpu}, "offload=cpu"),
    ({"accumulate_grad_batches": 4}, "trainer.accumulate_grad_batches=4"),
    ({"sharded": True}, "FSDP2"),
    ({"processes": 2}, "2 processes (DDP)"),
    ({"free_memory": MIN_FREE_MEMORY / 2}, "of the device's memory is free"),
])
def test_auto_is_off_with_the_reason(changes: dict[str, object], reason: str) -> None:
    decision = cudagraphs_decision(AUTO, _replace(**changes))
    assert not decision.on
    assert decision.reason.startswith("cudagraphs=auto: ") and reason in decision.reason, decision.reason
    assert decision.describe() == f"off: {decision.reason}"


def test_disabled_and_reduce_overhead_keep_their_meaning() -> None:
    """``disabled`` is off everywhere, ``reduce_overhead`` on every CUDA device whatever the step (what cannot
    work beside it is the config check's to refuse); only an explicit request is worth a line when off."""
    assert not cudagraphs_decision(CudaGraphMode.disabled, ELIGIBLE).on
    assert not cudagraphs_decision(CudaGraphMode.disabled, ELIGIBLE).worth_saying
    asked = CudaGraphMode.reduce_overhead
    assert cudagraphs_decision(asked, _replace(shape=ShapePolicy.automatic, processes=2)).on
    on_cpu = cudagraphs_decision(asked, _replace(on_cuda=False))
    assert not on_cpu.on and on_cpu.worth_saying and "no CUDA device" in on_cpu.reason
    assert not cudagraphs_decision(AUTO, _replace(on_cuda=False)).worth_saying  # the CPU default: nothing changes
    assert cudagraphs_decision(AUTO, _replace(processes=2)).worth_saying  # on CUDA: say why not


def test_the_plan_follows_the_decision_and_compiles_accordingly() -> None:
    """The plan asks the decision once: on, Inductor gets reduce-overhead; off, the same plan without it."""
    from runner.stack.compiling.plan import resolve_plan

    cfg = CompileConfig(scope=Scope.step)
    cuda = torch.device("cuda", 0)
    on = resolve_plan(cfg, CudaGraphsConfig(), False, cuda, facts=ELIGIBLE)
    assert on.cudagraphs and on.kwargs["mode"] == "reduce-overhead" and on.cudagraphs_decision.on
    assert "mode" not in on.uncaptured_kwargs
    off = resolve_plan(cfg, CudaGraphsConfig(), None, cuda, facts=_replace(shape=ShapePolicy.dynamic))
    assert not off.cudagraphs and "mode" not in off.kwargs
    assert "dynamic.policy=dynamic" in off.cudagraphs_decision.reason
    # Without the fit's facts the plan assumes shapes may vary: conservative, off.
    assert not resolve_plan(cfg, CudaGraphsConfig(), None, cuda).cudagraphs
    cpu = resolve_plan(cfg, CudaGraphsConfig(), False, torch.device("cpu"))
    assert not cpu.cudagraphs and cpu.kwargs == resolve_plan(
        cfg, CudaGraphsConfig(mode=CudaGraphMode.disabled), False, torch.device("cpu")).kwargs


def test_auto_is_the_default_and_never_refused_or_warned_about(tmp_path: Path) -> None:
    """The composed default is auto; on the CPU it neither warns (reduce_overhead there does) nor is refused
    beside what reduce_overhead cannot work with (FSDP, unbacked shapes, offload=cpu, accumulation)."""
    cfg = load(compose(run_dir=str(tmp_path)))
    assert cfg.cudagraphs.mode is AUTO and CudaGraphsConfig().mode is AUTO
    validate(cfg)
    assert not any("CUDA" in message for message in notes(cfg))
    from runner.torch_internals import runtime

    beside = [["trainer=fsdp", "compile=blocks"], ["dynamic=dynamic"], ["offload=cpu"],
              ["trainer.accumulate_grad_batches=2"]]
    if runtime.unbacked_bounds_unsupported() is None:  # torch 2.11 refuses unbacked for a reason of its own
        beside.append(["dynamic=unbacked"])
    for overrides in beside:
        validate(load(compose([*overrides, "cudagraphs=auto"], run_dir=str(tmp_path))))
    explicit = load(compose(["cudagraphs=reduce_overhead"], run_dir=str(tmp_path)))
    assert any("CUDA graphs need a CUDA device" in message for message in notes(explicit))


def test_a_cpu_fit_under_auto_is_unchanged_and_says_why() -> None:
    """A CPU fit with the default: no CUDA-graph component, no warning, ``cudagraphs/decision`` says why, and the
    compile arguments are those of ``cudagraphs=disabled``."""
    from runner.strategy import CompileStrategy
    from tests.helpers import tiny_data, tiny_module

    def fit(mode: CudaGraphMode) -> CompileStrategy:
        strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step, backend="eager"),
                                   dynamic=DynamicConfig(policy=ShapePolicy.static),
                                   cudagraphs=CudaGraphsConfig(mode=mode))
        trainer = L.Trainer(strategy=strategy, accelerator="cpu", devices=1, max_steps=2, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=0)
        trainer.fit(tiny_module(), tiny_data())
        return strategy

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        auto = fit(AUTO)
    assert not [w for w in caught if "CUDA" in str(w.message)]
    figures = auto.stack.figures()
    assert figures["cudagraphs/decision"] == "off: cudagraphs=auto: no CUDA device"
    from runner.telemetry.report import summary_rows

    assert dict(summary_rows(figures))["CUDA graphs"] == "off: cudagraphs=auto: no CUDA device"  # which and why
    assert figures["cudagraphs/active"] is False and figures["cudagraphs/requested"] is False
    assert figures["compile/optimizer"] == "fused"  # never graphed without CUDA graphs
    disabled = fit(CudaGraphMode.disabled).stack
    assert auto.stack.parts is not None and disabled.parts is not None
    assert auto.stack.parts.plan.kwargs == disabled.parts.plan.kwargs
