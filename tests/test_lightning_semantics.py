"""Issue 35: with runner's strategy a Trainer behaves as Lightning's own in everything but speed.

One regression test per behaviour Lightning's own test suite found different (``scripts/lightning_suite.py``
runs that suite): many fits in one process, the step's signature, the optimizer closure contract, logging
visible where Lightning makes it visible, and a strategy that pickles and deep-copies.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import nn

from runner.config.schema import CompileConfig, OptimizerPolicy
from runner.strategy import CompileStrategy
from tests.zoo.data import VectorsDataModule


def _strategy(optimizer: OptimizerPolicy = OptimizerPolicy.auto) -> CompileStrategy:
    return CompileStrategy(compile=CompileConfig(backend="eager", optimizer=optimizer), device="cpu")


def _trainer(strategy: Any = None, **kwargs: Any) -> L.Trainer:
    args: dict[str, Any] = dict(max_steps=6, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, limit_val_batches=0)
    args.update(kwargs)
    return L.Trainer(strategy=strategy, **args) if strategy is not None else L.Trainer(accelerator="cpu", **args)


class Base(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(16, 4)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


# -- 1. many fits in one process ------------------------------------------------------------------------
def test_many_fits_in_one_process_each_compile_afresh() -> None:
    """An inherited training_step (one code object) fitted by twelve subclasses, one after another: each
    fit compiles once; none inherits the previous fits' cache entries or hits the recompile limit."""
    from torch._dynamo.utils import counters

    for i in range(12):
        subclass = type(f"Fold{i}", (Base,), {})
        before = counters["frames"]["total"]
        _trainer(_strategy()).fit(subclass(), VectorsDataModule())
        assert counters["frames"]["total"] - before == 1, f"fit {i}"


def test_a_counter_on_the_module_compiles_once_more_not_every_step() -> None:
    class Counting(Base):
        def __init__(self) -> None:
            super().__init__()
            self.training_step_invoked = 0

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.training_step_invoked += 1
            return super().training_step(batch, batch_idx)

    strategy = _strategy()
    module = Counting()
    _trainer(strategy, max_steps=10).fit(module, VectorsDataModule())
    assert module.training_step_invoked == 10
    assert strategy.figures()["compile/demoted"] == []
    from torch._dynamo.utils import counters

    assert counters["stats"]["unique_graphs"] <= 2


def test_a_users_own_compiled_function_survives_a_fit() -> None:
    """Forgetting the fit's frames leaves other compiled code of the process working (it may recompile)."""
    double = torch.compile(lambda t: t * 2, backend="eager")
    assert torch.equal(double(torch.ones(2)), torch.full((2,), 2.0))
    _trainer(_strategy()).fit(Base(), VectorsDataModule())
    assert torch.equal(double(torch.ones(2)), torch.full((2,), 2.0))


# -- 2. the step's signature ---------------------------------------------------------------------------
def test_a_step_without_batch_idx_is_called_as_lightning_calls_it() -> None:
    class NoIndex(Base):
        def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
            return super().training_step(batch, 0)

    strategy = _strategy()
    _trainer(strategy).fit(NoIndex(), VectorsDataModule())
    assert strategy.figures()["compile/target"] == "step"


def test_a_dataloader_iter_step_pulls_its_own_batches() -> None:
    class PullsBatches(Base):
        seen = 0

        def training_step(self, dataloader_iter: Iterator[Any]) -> torch.Tensor:  # type: ignore[override]
            batch, _, _ = next(dataloader_iter)
            self.seen += 1
            return super().training_step(batch, 0)

    strategy, module = _strategy(), PullsBatches()
    _trainer(strategy).fit(module, VectorsDataModule())
    assert module.seen == 6
    assert strategy.figures()["compile/target"] == "submodules"  # the batch never reaches a compiled step


# -- 3. the optimizer closure contract ----------------------------------------------------------------
class WithOptimizer(Base):
    def __init__(self, make: Callable[[Any], torch.optim.Optimizer]) -> None:
        super().__init__()
        self.make = make
        self.returned: list[Any] = []

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.make(self.parameters())

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.returned.append(optimizer.step(closure=optimizer_closure))


@pytest.mark.parametrize("policy", [OptimizerPolicy.auto, OptimizerPolicy.compiled])
def test_lbfgs_gets_its_closure_and_trains_like_eager(policy: OptimizerPolicy) -> None:
    def make(p: Any) -> torch.optim.Optimizer:
        return torch.optim.LBFGS(p, lr=0.1, max_iter=3)

    def run(strategy: Any) -> torch.Tensor:
        L.seed_everything(0, verbose=False)
        module = WithOptimizer(make)
        _trainer(strategy).fit(module, VectorsDataModule())
        return module.net.weight.detach().clone()

    strategy = _strategy(policy)
    assert torch.equal(run(strategy), run(None))  # eager backend, eager LBFGS: the same kernels, to the bit
    assert strategy.figures()["compile/optimizer"] == "none"  # LBFGS's step needs the closure: eager


@pytest.mark.parametrize("policy", [OptimizerPolicy.none, OptimizerPolicy.fused, OptimizerPolicy.compiled])
def test_the_optimizer_runs_the_closure_and_its_return_value_is_the_steps(policy: OptimizerPolicy) -> None:
    """Lightning calls optimizer.step(closure): the optimizer runs training_step, zero_grad and backward
    inside its own step, and whatever step returns is what the user's optimizer_step gets back."""
    order: list[str] = []

    class Custom(torch.optim.Adam):
        def step(self, closure: Any = None) -> Any:  # type: ignore[override]
            order.append("optimizer.step")
            loss = closure()
            super().step()
            return ("custom", float(loss))

    class Ordered(WithOptimizer):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            order.append("training_step")
            return super().training_step(batch, batch_idx)

        def on_before_zero_grad(self, optimizer: Any) -> None:
            order.append("zero_grad")

        def on_before_backward(self, loss: torch.Tensor) -> None:
            order.append("backward")

    module = Ordered(lambda p: Custom(p, lr=0.01))
    strategy = _strategy(policy)
    _trainer(strategy, max_steps=2).fit(module, VectorsDataModule())
    assert [r[0] for r in module.returned] == ["custom", "custom"]
    assert order == ["optimizer.step", "training_step", "zero_grad", "backward"] * 2
    if policy is OptimizerPolicy.compiled:  # a step the user wrote is never replaced by a compiled one
        assert strategy.figures()["compile/optimizer"] == "none"


def test_a_compiled_torch_optimizer_step_returns_the_closures_loss() -> None:
    module = WithOptimizer(lambda p: torch.optim.Adam(p, lr=0.01))
    strategy = _strategy(OptimizerPolicy.compiled)
    _trainer(strategy, max_steps=2).fit(module, VectorsDataModule())
    assert strategy.figures()["compile/optimizer"] == "compiled"
    assert all(isinstance(r, torch.Tensor) and r.ndim == 0 for r in module.returned)


def test_an_optimizer_that_skips_the_closure_is_reported_as_lightning_reports_it() -> None:
    class Skips(Base):
        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            optimizer.step()  # no closure: training_step never runs

    for strategy in (None, _strategy()):
        with pytest.raises(MisconfigurationException, match="closure hasn't been executed"):
            _trainer(strategy).fit(Skips(), VectorsDataModule())


def test_step_keyword_arguments_reach_the_optimizer() -> None:
    seen: list[dict[str, Any]] = []

    class Recording(torch.optim.SGD):
        def step(self, closure: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
            seen.append(kwargs)
            return super().step(closure)

    class PassesKwargs(WithOptimizer):
        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            optimizer.step(closure=optimizer_closure, note=batch_idx)

    _trainer(_strategy(OptimizerPolicy.none), max_steps=2).fit(
        PassesKwargs(lambda p: Recording(p, lr=0.1)), VectorsDataModule())
    assert seen == [{"note": 0}, {"note": 1}]


# -- 4. logging visible where Lightning makes it visible ----------------------------------------------
def test_an_eager_step_logs_into_the_trainer_during_the_step() -> None:
    """Where the step is not compiled (scope=model here), self.log lands in the trainer's results at once,
    as in Lightning; a metric's methods inside the step are the user's own."""
    seen: list[bool] = []

    class Peeks(Base):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("peek", loss)
            seen.append("peek" in self.trainer.callback_metrics or "peek" in self.trainer.logged_metrics
                        or "training_step.peek" in self.trainer._results)
            return loss

    from runner.config.schema import Scope

    strategy = CompileStrategy(compile=CompileConfig(backend="eager", scope=Scope.model), device="cpu")
    _trainer(strategy, max_steps=2).fit(Peeks(), VectorsDataModule())
    assert seen == [True, True]


# -- 5. pickling and deep copies ------------------------------------------------------------------------
def test_a_trainer_with_runners_strategy_pickles_and_deep_copies_before_and_after_fit() -> None:
    strategy = _strategy()
    trainer = _trainer(strategy)
    for clone in (pickle.loads(pickle.dumps(strategy)), copy.deepcopy(trainer).strategy):
        assert isinstance(clone, CompileStrategy)
    trainer.fit(Base(), VectorsDataModule())
    after = pickle.loads(pickle.dumps(strategy))
    assert after.figures()["compile/scope"] == "step"
    copy.deepcopy(trainer)


def test_a_step_that_reads_back_what_it_logged_sees_it_as_in_lightning() -> None:
    """The trainer's results hold a value right after self.log inside the step; runner compiles such a
    step's submodules (logging stays eager) and says why."""
    seen: list[float] = []

    class ReadsBack(Base):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("tracking", float(batch_idx), on_step=True, on_epoch=True)
            seen.append(float(self.trainer.fit_loop._results["training_step.tracking"].value))
            return super().training_step(batch, batch_idx)

    _trainer(None, max_steps=3).fit(ReadsBack(), VectorsDataModule())
    lightning, seen[:] = list(seen), []
    strategy = _strategy()
    _trainer(strategy, max_steps=3).fit(ReadsBack(), VectorsDataModule())
    assert seen == lightning and len(seen) == 3
    assert strategy.figures()["compile/target"] == "submodules"


def test_self_optimizers_in_a_compiled_step_is_the_one_optimizer_with_its_groups() -> None:
    class ReadsLr(Base):
        def __init__(self) -> None:
            super().__init__()
            self.lrs: list[float] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            opt = self.optimizers()
            self.lrs.append(opt.param_groups[0]["lr"])
            return super().training_step(batch, batch_idx)

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5),
                                                       "interval": "step"}}

    strategy, module = _strategy(), ReadsLr()
    _trainer(strategy, max_steps=6).fit(module, VectorsDataModule())
    assert module.lrs == pytest.approx([0.1 * 0.5**i for i in range(6)])
    assert strategy.figures()["compile/target"] == "step" and strategy.figures()["compile/demoted"] == []
    from torch._dynamo.utils import counters

    assert counters["stats"]["unique_graphs"] <= 2  # the LR became a graph input after it first changed


def test_a_metric_method_the_user_replaced_is_left_alone() -> None:
    from unittest import mock

    from torchmetrics import MeanMetric

    class Instrumented(Base):
        def __init__(self) -> None:
            super().__init__()
            self.mean = MeanMetric()
            self.mean.reset = mock.Mock(side_effect=self.mean.reset)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.mean.reset.reset_mock()  # the user's own Mock, inside the step
            return loss

    _trainer(_strategy(), max_steps=2).fit(Instrumented(), VectorsDataModule())


def test_a_step_the_user_put_on_the_instance_is_what_runs_and_comes_back() -> None:
    calls: list[int] = []
    module = Base()
    original = module.training_step

    def recording(batch: Any, batch_idx: int) -> torch.Tensor:
        calls.append(batch_idx)
        return original(batch, batch_idx)

    module.training_step = recording  # type: ignore[method-assign]
    _trainer(_strategy(), max_steps=3).fit(module, VectorsDataModule())
    assert calls == [0, 1, 2]
    assert module.training_step is recording
