"""Recompile storms (issue 28): what runner cannot lift is demoted early under the default
``compile.on_error=auto``; a recompile-limit hit says what is true and ends the run only under ``raise``.

The storm here is a Python string the step branches on, changed before every step by a callback: a
guard no policy can lift (a string is never a graph input), failing every step.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import pytest
import torch
from torch import nn

from runner.config.schema import CompileConfig, DynamicConfig, OnError, OptimizerPolicy
from runner.strategy import CompileStrategy
from tests.zoo.data import VectorsDataModule


class Phased(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(16, 4)
        self.phase = "phase-0"

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        if self.phase.endswith("7"):
            loss = loss * 1.0
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class NewPhaseEveryStep(L.Callback):
    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        pl_module.phase = f"phase-{trainer.global_step}"


def _strategy(on_error: str, recompile_limit: int = 8) -> CompileStrategy:
    return CompileStrategy(compile=CompileConfig(backend="eager", optimizer=OptimizerPolicy.none,
                                                 on_error=OnError[on_error]),
                           dynamic=DynamicConfig(recompile_limit=recompile_limit), device="cpu")


def _fit(on_error: str, recompile_limit: int = 8, strategy: CompileStrategy | None = None,
         ) -> tuple[CompileStrategy, L.Trainer]:
    strategy = strategy or _strategy(on_error, recompile_limit)
    trainer = L.Trainer(strategy=strategy, max_steps=12, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[NewPhaseEveryStep()])
    trainer.fit(Phased(), VectorsDataModule())
    return strategy, trainer


def test_the_default_demotes_a_storming_step_after_its_second_recompile(caplog: pytest.LogCaptureFixture) -> None:
    from torch._dynamo.utils import counters

    with caplog.at_level("WARNING"):
        strategy, trainer = _fit("auto")
    figures = strategy.figures()
    assert trainer.global_step == 12
    [demoted] = figures["compile/demoted"]
    assert "self.phase" in demoted["guard"] and demoted["to"] == "compiled submodules"
    assert demoted["step"] <= 3  # the first compile and two recompiles, then no more
    assert counters["frames"]["total"] <= 4  # not the eight compiles of torch's recompile limit
    assert figures["compile/recompile_limit_hits"] == []
    assert "compile/demoted" in caplog.text and "self.phase" in caplog.text


def test_a_limit_hit_under_eager_goes_on_and_says_so_truthfully(caplog: pytest.LogCaptureFixture) -> None:
    """A limit below the demotion point: torch's limit is hit first; the frame runs eagerly, as the warning says."""
    with caplog.at_level("WARNING"):
        strategy, trainer = _fit("eager", recompile_limit=2)
    assert trainer.global_step == 12
    assert strategy.figures()["compile/recompile_limit_hits"]
    assert "recompile limit" in caplog.text and "runs eagerly from now on" in caplog.text


def test_a_limit_hit_under_raise_stops_with_the_paragraph_its_strategy_gives() -> None:
    """What ``runner.run`` does with an error a fit raised: it asks the strategy, which answers for its stack, whose
    watch saw the guard that kept failing (the error alone does not name it)."""
    from torch._dynamo.exc import FailOnRecompileLimitHit

    from runner.stack.errors.explain import explain_compile_error

    strategy = _strategy("raise", recompile_limit=3)
    with pytest.raises(FailOnRecompileLimitHit) as info:
        _fit("raise", strategy=strategy)
    paragraph = strategy.explain_compile_error(info.value)
    assert paragraph is not None and "recompile limit" in paragraph and "Fix:" in paragraph
    assert "the guard that kept failing" in paragraph and "self.phase" in paragraph, paragraph
    alone = explain_compile_error(info.value)
    assert alone is not None and "self.phase" not in alone  # what the stack saw, not what the error says
    assert strategy.explain_compile_error(ValueError("not a compile error")) is None
