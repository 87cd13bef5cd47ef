"""``CompileStrategy`` in a user's own Trainer (issue 28): Lightning's names for it, what the user sees,
built-in torch modules really compiled, and a module that cannot train explained in one paragraph."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn

from runner.config.schema import CompileConfig, Scope
from runner.strategy import CompileStrategy
from tests.zoo.data import VectorsDataModule

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = cwd / "script.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


class Sequentials(L.LightningModule):
    """Everything the step computes is inside built-in torch modules (nn.Sequential of nn.Linear)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(module: L.LightningModule, strategy: Any, **kwargs: Any) -> L.Trainer:
    trainer = L.Trainer(strategy=strategy, max_steps=4, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, **kwargs)
    trainer.fit(module, VectorsDataModule())
    return trainer


@pytest.mark.slow
def test_strategy_names_resolve_whichever_is_imported_first(tmp_path: Path) -> None:
    for first, second in (("runner", "lightning"), ("lightning", "runner")):
        result = _python(f"""
            import {first}, {second}
            import lightning as L
            print(type(L.Trainer(strategy="compile", logger=False).strategy).__name__)
            print(type(L.Trainer(strategy="compile_ddp", accelerator="cpu", devices=1, logger=False).strategy).__name__)
        """, tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["CompileStrategy", "DDPCompileStrategy"], (first, result.stdout)


@pytest.mark.slow
def test_a_lightning_cli_script_trains_and_checkpoints_with_the_strategy_by_name(tmp_path: Path) -> None:
    result = _python("""
        import torch
        import runner  # registers strategy="compile"
        from lightning.pytorch.cli import LightningCLI
        from tests.zoo.data import VectorsDataModule
        from tests.test_own_trainer import Sequentials

        LightningCLI(Sequentials, VectorsDataModule)
    """, tmp_path, "fit", "--trainer.strategy=compile", "--trainer.max_steps=3", "--trainer.limit_val_batches=0",
        f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false", "--trainer.enable_progress_bar=false")
    assert result.returncode == 0, result.stderr[-3000:]
    [ckpt] = list(tmp_path.rglob("*.ckpt"))
    keys = torch.load(ckpt, weights_only=False)["state_dict"].keys()
    assert keys and not any("_orig_mod" in k or "forward" in k for k in keys), list(keys)
    assert "compiling" in result.stdout + result.stderr  # what compiles is shown, as in runner's own runs


@pytest.mark.parametrize("scope", [Scope.model, Scope.blocks, Scope.step])
def test_built_in_torch_modules_compile_real_frames(scope: Scope) -> None:
    """torch 2.11-2.13's nn.Module.compile() captures no frame for built-in modules (#150915); runner's
    in-place compile does, for every scope."""
    from torch._dynamo.utils import counters

    cfg = CompileConfig(scope=scope, backend="eager", block_types=["Linear"] if scope is Scope.blocks else [])
    strategy = CompileStrategy(compile=cfg, device="cpu")
    module = Sequentials()
    _fit(module, strategy)
    assert counters["frames"]["ok"] >= 1
    assert "forward" not in vars(module.net)  # put back at teardown
    assert list(module.state_dict()) == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]


@pytest.mark.slow
def test_your_own_trainer_shows_what_compiles_and_a_summary(tmp_path: Path) -> None:
    code = """
        import logging, sys
        import lightning as L
        from runner import CompileStrategy, CompileConfig
        from tests.zoo.data import VectorsDataModule
        from tests.test_own_trainer import Sequentials
        if sys.argv[1] == "quiet":
            logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
        L.Trainer(strategy=CompileStrategy(compile=CompileConfig(backend="eager")), max_steps=3, logger=False,
                  enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=0
                  ).fit(Sequentials(), VectorsDataModule())
    """
    loud = _python(code, tmp_path, "loud")
    assert loud.returncode == 0, loud.stderr
    out = loud.stdout + loud.stderr
    assert "compiling training_step" in out and "compiled training_step" in out
    assert "runner: 1 compile (0 recompiles), 0 graph breaks" in out and "optimizer step: fused" in out
    quiet = _python(code, tmp_path, "quiet")
    assert quiet.returncode == 0 and "compiling" not in quiet.stdout + quiet.stderr


def test_a_module_with_nothing_to_train_gets_one_paragraph() -> None:
    class Frozen(Sequentials):
        def __init__(self) -> None:
            super().__init__()
            self.net.requires_grad_(False)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1)

    with pytest.raises(ValueError, match=r"Frozen has no trainable parameters.*requires_grad=True.*validate"):
        _fit(Frozen(), CompileStrategy(compile=CompileConfig(backend="eager"), device="cpu"))


def test_a_fit_that_compiled_nothing_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """scope=model on a module whose parameters are its own (no child module to compile)."""

    class Bare(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(16, 4))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.cross_entropy(x @ self.w, y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.model, backend="eager"), device="cpu")
    with caplog.at_level("WARNING"):
        _fit(Bare(), strategy)
    assert strategy.figures()["compile/frames"] == 0
    assert caplog.text.count("runner compiled nothing in this fit") == 1


def test_validate_and_test_after_fit_leave_the_fits_figures_alone() -> None:
    """Lightning tears the strategy down after validate/test too; the fit's figures stay what the fit did."""

    class Validated(Sequentials):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val", self.training_step(batch, batch_idx))

    strategy = CompileStrategy(compile=CompileConfig(backend="eager"), device="cpu")
    module = Validated()
    trainer = _fit(module, strategy)
    frames = strategy.figures()["compile/frames"]
    assert frames >= 1
    trainer.validate(module, VectorsDataModule(), verbose=False)
    assert strategy.figures()["compile/frames"] == frames
