"""Checkpoints of compiled runs use the original parameter names, load into an eager model, and
resume with compilation on or off."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from runner.config.schema import CompileConfig, OptimizerPolicy, Scope
from runner.models.gpt import GPT
from runner.strategy import CompileStrategy
from tests.helpers import LossRecorder, tiny_data, tiny_module


def _trainer(scope: Scope, ckpt_dir: Path, steps: int, optimizer: OptimizerPolicy = OptimizerPolicy.compiled,
             rec: LossRecorder | None = None) -> L.Trainer:
    strategy = CompileStrategy(compile=CompileConfig(scope=scope, backend="aot_eager", optimizer=optimizer),
                               device="cpu")
    callbacks: list = [ModelCheckpoint(dirpath=ckpt_dir, save_last=True, save_top_k=0, every_n_train_steps=5)]
    if rec is not None:
        callbacks.append(rec)
    return L.Trainer(strategy=strategy, max_steps=steps, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, limit_val_batches=0, callbacks=callbacks)


@pytest.mark.parametrize("scope", [Scope.model, Scope.step, Scope.blocks])
def test_compiled_checkpoint_loads_into_eager_model_strictly(scope: Scope, tmp_path: Path) -> None:
    module = tiny_module()
    _trainer(scope, tmp_path, steps=5).fit(module, tiny_data())
    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=False)
    keys = list(ckpt["state_dict"])
    assert not any("_orig_mod" in k for k in keys), keys
    eager = GPT(n_layer=2, n_embd=32, n_head=2, block_size=32)
    state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}
    eager.load_state_dict(state, strict=True)
    assert torch.equal(eager.head.weight, module.model.head.weight)  # the checkpoint's copy of the weights: bitwise


@pytest.mark.parametrize("resume_scope", [Scope.none, Scope.step])
def test_resume_with_compile_on_or_off_continues_the_same_run(resume_scope: Scope, tmp_path: Path) -> None:
    full = LossRecorder()
    _trainer(Scope.step, tmp_path / "full", steps=10, rec=full).fit(tiny_module(), tiny_data())

    _trainer(Scope.step, tmp_path / "part", steps=5).fit(tiny_module(), tiny_data())
    resumed = LossRecorder()
    trainer = _trainer(resume_scope, tmp_path / "part", steps=10, rec=resumed)
    trainer.fit(tiny_module(seed=99), tiny_data(), ckpt_path=str(tmp_path / "part" / "last.ckpt"))
    assert trainer.global_step == 10
    # Same data order, same weights and optimizer state (tensor LR included): the same losses.
    torch.testing.assert_close(torch.tensor(resumed.losses), torch.tensor(full.losses[5:]), rtol=1e-4, atol=0)
