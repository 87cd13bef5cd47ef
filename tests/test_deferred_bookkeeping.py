"""Unit tests of the deferred bookkeeping, the Python-state sources and the manual-optimization plan
(no Trainer: the zoo in test_idioms.py trains them for real)."""

from __future__ import annotations

from typing import Any

import lightning as L
import pytest
import torch
from torch import nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from runner.config.schema import CompileConfig, CudaGraphsConfig, Scope
from runner.lightning_step.deferred_log import METRIC_METHODS, Deferred, DeferredLog, DeferredValueError, metric_methods
from runner.stack.compiling.plan import resolve_plan, resolve_step_target, step_blocker, step_note
from runner.stack.python_state import state_sources


class _Module(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(3, 2)
        self.avg = MeanMetric()
        self.col = MetricCollection({"acc": MulticlassAccuracy(num_classes=2)})
        self.logged: list[tuple[str, Any]] = []

    def log(self, name: str, value: Any, **kwargs: Any) -> None:  # type: ignore[override]
        # what Lightning's log would see, in order
        self.logged.append((name, float(value.compute()) if isinstance(value, MeanMetric) else value))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = self.net(batch).pow(2).mean()
        batch_value = self.avg(loss)
        self.log("avg", self.avg)
        self.log("batch", batch_value)
        return {"loss": loss, "batch": batch_value}


def _step(module: _Module, deferred: DeferredLog, step: Any, batch: torch.Tensor) -> Any:
    with deferred.capture(module):
        out = step(batch, 0)
    return deferred.resolve(out)


@pytest.mark.parametrize("backend", [None, "eager"])
def test_metric_calls_and_logs_replay_in_order_with_real_values(backend: str | None) -> None:
    module = _Module()
    deferred = DeferredLog()
    deferred.bind(module, metric_methods(module))
    step = module.training_step if backend is None else torch.compile(module.training_step, backend=backend)
    batch = torch.randn(4, 3)
    out = _step(module, deferred, step, batch)
    loss = float(module.net(batch).pow(2).mean())
    # the metric was updated before log read it, and the returned batch value is the real tensor
    assert module.logged == [("avg", pytest.approx(loss)), ("batch", out["batch"])]
    assert isinstance(out["batch"], torch.Tensor) and float(out["batch"]) == pytest.approx(loss)
    assert float(module.avg.compute()) == pytest.approx(loss)
    assert "forward" not in vars(module.avg) and "log" not in vars(module)  # the class's methods are back
    assert deferred.calls == []


def test_a_step_that_raises_leaves_nothing_behind() -> None:
    module = _Module()
    update = vars(module.avg)["update"]
    deferred = DeferredLog()
    deferred.bind(module, metric_methods(module))

    def failing(batch: Any, batch_idx: int) -> None:
        module.avg(torch.tensor(1.0))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"), deferred.capture(module):
        failing(None, 0)
    assert deferred.calls == [] and vars(module.avg)["update"] is update
    assert int(module.avg.update_count) == 0  # nothing replayed from the failed step


def test_deferred_value_refuses_arithmetic_with_the_fix() -> None:
    value = Deferred("MeanMetric.forward(...)")
    for use in (lambda: value + 1, lambda: 2 * value, lambda: value < 3, lambda: bool(value), lambda: value.item()):
        with pytest.raises(DeferredValueError, match="torchmetrics.functional"):
            use()
    with pytest.raises(AttributeError):
        value.__deepcopy__  # noqa: B018  (copy protocol probes get AttributeError, not our error)


def test_metric_methods_finds_metrics_and_collections() -> None:
    module = _Module()
    found = {id(m): names for m, names in metric_methods(module)}
    assert found[id(module.avg)] == METRIC_METHODS
    assert id(module.col) in found and id(module.col["acc"]) in found
    assert id(module.net) not in found


def test_state_sources_name_the_step_arguments() -> None:
    class M(L.LightningModule):
        def training_step(self, batch: Any, idx: int) -> None: ...

    patterns = state_sources(M().training_step)
    assert patterns == [r"L\['self'\]\._trainer\.fit_loop\..*", r"L\['idx'\]$"]
    assert state_sources(lambda *args, **kwargs: None) == []


@pytest.mark.parametrize("scope", list(Scope))
@pytest.mark.parametrize("why", ["manual", "dataloader_iter", "reads_results"])
def test_a_step_that_cannot_be_compiled_whole_compiles_its_submodules(scope: Scope, why: str) -> None:
    """Manual optimization, and a training_step that pulls its own batches from dataloader_iter."""
    plan = resolve_plan(CompileConfig(scope=scope), CudaGraphsConfig(), None, torch.device("cpu"))
    assert resolve_step_target(plan, step_compilable=True) is plan
    kwargs = {"manual": {"automatic_optimization": False}, "dataloader_iter": {"pulls_batches": True},
              "reads_results": {"reads_results": True}}[why]
    resolved = resolve_plan(CompileConfig(scope=scope), CudaGraphsConfig(), None, torch.device("cpu"),
                            **kwargs)
    assert resolved == resolve_step_target(plan, step_compilable=False)
    note = step_note(scope, resolved, step_blocker(**{"automatic_optimization": True, **kwargs}))
    if scope in (Scope.step, Scope.step_backward):
        assert resolved.target is Scope.model and not resolved.backward_in_step
        assert note is not None and {"manual": "manual", "dataloader_iter": "dataloader_iter",
                                     "reads_results": "reads back what it logged"}[why] in note
    else:
        assert resolved == plan and note is None
