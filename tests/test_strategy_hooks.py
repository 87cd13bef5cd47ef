"""Compiled autograd: user gradient hooks on parameters and intermediates are captured and applied."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from runner.config.schema import CompileConfig, OptimizerPolicy, Scope
from runner.strategy import CompileStrategy
from tests.tolerance import drift

# aot_eager's decomposed backward against eager autograd, over 4 SGD steps of a small MLP with clamping hooks: the
# gradients' reductions may take another order (about 16 roundings a step).
GRAD_TOL = drift(steps=4, depth=16)


class HookedModule(L.LightningModule):
    """Scales the gradient of an intermediate activation by 3 and clips a parameter's gradient."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)
        self.l1.weight.register_hook(lambda g: g.clamp(-0.01, 0.01))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        h = torch.relu(self.l1(x))
        h.register_hook(lambda g: g * 3)
        loss = nn.functional.cross_entropy(self.l2(h), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> Any:
        g = torch.Generator().manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 4, (64,), generator=g))
        return torch.utils.data.DataLoader(data, batch_size=16)


class GradRecorder(Callback):
    def __init__(self) -> None:
        self.grads: list[dict[str, torch.Tensor]] = []

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        self.grads.append({n: p.grad.clone() for n, p in pl_module.named_parameters()})


def _grads(cfg: CompileConfig) -> list[dict[str, torch.Tensor]]:
    rec = GradRecorder()
    trainer = L.Trainer(strategy=CompileStrategy(compile=cfg, device="cpu"), max_steps=4, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[rec])
    trainer.fit(HookedModule())
    return rec.grads


def test_compiled_autograd_applies_parameter_and_intermediate_hooks() -> None:
    from torch._dynamo.utils import counters

    eager = _grads(CompileConfig(scope=Scope.none, optimizer=OptimizerPolicy.none))
    compiled = _grads(CompileConfig(scope=Scope.step, backend="aot_eager", optimizer=OptimizerPolicy.none,
                                    compiled_autograd=True))
    assert counters["compiled_autograd"]["captures"] >= 1  # the backward really went through compiled autograd
    assert len(eager) == len(compiled) == 4
    assert eager[0]["l1.weight"].abs().max() <= 0.01 + 1e-7  # the parameter hook ran
    for e, c in zip(eager, compiled, strict=True):
        for name in e:
            torch.testing.assert_close(c[name], e[name], **GRAD_TOL.kwargs)


def test_hooks_without_compiled_autograd_still_apply() -> None:
    eager = _grads(CompileConfig(scope=Scope.none, optimizer=OptimizerPolicy.none))
    compiled = _grads(CompileConfig(scope=Scope.step, backend="aot_eager", optimizer=OptimizerPolicy.none))
    for e, c in zip(eager, compiled, strict=True):
        for name in e:
            torch.testing.assert_close(c[name], e[name], **GRAD_TOL.kwargs)
