"""CompileStrategy: every scope and optimizer policy trains like eager; graphs are not fragmented."""

from __future__ import annotations

import pytest
import torch

from runner.config.schema import OptimizerPolicy, Scope
from runner.stack.compiling.plan import CPU_INDUCTOR_OPTIONS
from tests.helpers import fit_losses

STEPS = 20
# aot_eager runs the same ATen ops as eager (traced, decomposed): differences are float reassociation.
AOT_EAGER_RTOL = 1e-4
# Inductor fuses and reorders reductions; over 20 AdamW steps losses stay within this.
INDUCTOR_RTOL = 2e-3
# The fused AdamW kernel rounds differently from the foreach path.
FUSED_RTOL = 1e-4


@pytest.fixture(scope="module")
def eager_losses() -> list[float]:
    losses, _, _ = fit_losses(Scope.none, steps=STEPS)
    assert losses[-1] < losses[0] - 0.3, "the eager baseline must actually learn"
    return losses


@pytest.mark.parametrize("scope", [Scope.model, Scope.step, Scope.step_backward, Scope.blocks])
def test_scope_matches_eager(scope: Scope, eager_losses: list[float]) -> None:
    losses, strategy, _ = fit_losses(scope, steps=STEPS)
    assert len(losses) == STEPS
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses), rtol=AOT_EAGER_RTOL, atol=0)


@pytest.mark.parametrize("policy", [OptimizerPolicy.compiled, OptimizerPolicy.fused, OptimizerPolicy.auto])
def test_optimizer_policy_matches_eager(policy: OptimizerPolicy, eager_losses: list[float]) -> None:
    losses, strategy, _ = fit_losses(Scope.step, optimizer=policy, steps=STEPS)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses), rtol=FUSED_RTOL, atol=0)
    summary = strategy.stack.figures()
    expected = OptimizerPolicy.fused if policy is OptimizerPolicy.auto else policy
    assert summary["compile/optimizer"] == expected.value
    assert summary["compile/optimizer_reason"]


def test_step_scope_is_one_graph_without_breaks() -> None:
    from torch._dynamo.utils import counters

    fit_losses(Scope.step, backend="eager", steps=4)
    assert counters["graph_break"] == {}, dict(counters["graph_break"])  # self.log did not break the graph
    assert counters["stats"]["unique_graphs"] == 1


def test_step_backward_is_one_graph_with_backward() -> None:
    from torch._dynamo.utils import counters

    fit_losses(Scope.step_backward, backend="eager", steps=4)
    assert counters["graph_break"] == {}, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1


def test_compiled_optimizer_with_scheduler_does_not_recompile() -> None:
    from torch._dynamo.utils import counters

    fit_losses(Scope.none, backend="eager", optimizer=OptimizerPolicy.compiled, steps=10)
    # The warm-up + cosine schedule changes the LR every step: a tensor LR keeps one graph set.
    assert counters["stats"]["unique_graphs"] <= 3  # torch's optimizer step breaks around no_grad by design


@pytest.mark.slow
def test_inductor_step_and_compiled_optimizer_match_eager(eager_losses: list[float]) -> None:
    losses, _, _ = fit_losses(Scope.step_backward, backend="inductor", optimizer=OptimizerPolicy.compiled, steps=STEPS)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses), rtol=INDUCTOR_RTOL, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("scope", [Scope.model, Scope.step, Scope.blocks])
def test_inductor_scopes_with_fused_optimizer_match_eager(scope: Scope, eager_losses: list[float]) -> None:
    """Real Inductor code for every other scope, with the optimizer auto picks on this CPU (fused)."""
    losses, strategy, _ = fit_losses(scope, backend="inductor", optimizer=OptimizerPolicy.auto, steps=STEPS)
    figures = strategy.stack.figures()
    assert figures["compile/optimizer"] == "fused"
    assert figures["compile/options"] == CPU_INDUCTOR_OPTIONS  # runner's CPU defaults reached the compile
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses), rtol=INDUCTOR_RTOL, atol=0)
