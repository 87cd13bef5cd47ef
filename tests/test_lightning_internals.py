"""Pins every private part of Lightning runner touches (``runner.lightning_internals``) on the installed
Lightning, and that ``import runner`` imports none of them (nor Lightning itself)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.strategies import ModelParallelStrategy, SingleDeviceStrategy

from runner import lightning_internals as li
from runner.lightning_step.log_fastpath import LogFastPath

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_import_runner_imports_no_lightning_and_no_torch() -> None:
    code = "import sys, runner; print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_result_metric_and_its_states() -> None:
    metric = li.result_metric_class()
    assert metric is not None and callable(metric.to)
    init = metric.__init__.__code__
    for name in li.RESULT_METRIC_STATES:
        assert name in init.co_names or f"'{name}'" in str(init.co_consts), name


def test_log_fast_path_installs_and_restores() -> None:
    metric = li.result_metric_class()
    original = metric.to
    fast = LogFastPath()
    fast.install()
    try:
        assert LogFastPath.active() and metric.to is not original
    finally:
        fast.restore()
    assert metric.to is original


def test_fit_loop_state_pattern_names_what_current_epoch_and_global_step_read() -> None:
    import inspect

    from lightning.pytorch.core.module import LightningModule

    for prop in ("current_epoch", "global_step"):
        source = inspect.getsource(getattr(LightningModule, prop).fget)
        assert "self._trainer" in source and "fit_loop" in source or "self.trainer" in source, prop
    assert re.fullmatch(li.FIT_LOOP_STATE, "._trainer.fit_loop.epoch_progress.current.completed")


def test_strategy_optimizer_lists() -> None:
    strategy = SingleDeviceStrategy(device=torch.device("cpu"))
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    strategy.optimizers = [opt]
    lists = dict((name, attrs[name]) for attrs, name in li.optimizer_lists(strategy))
    assert lists == {"_optimizers": [opt]}
    [wrapper] = li.lightning_optimizers(strategy)
    assert wrapper.optimizer is opt


def test_model_parallel_strategy_privates() -> None:
    strategy = ModelParallelStrategy(save_distributed_checkpoint=False)
    assert li.saves_distributed_checkpoint(strategy) is False
    assert hasattr(strategy, "_data_parallel_size") and hasattr(strategy, "_tensor_parallel_size")


def test_wandb_logger_privates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    logger = WandbLogger(save_dir=str(tmp_path), offline=True)
    assert li.started_wandb_run(logger) is None  # not started by reading it
    kwargs = li.wandb_init_kwargs(logger)
    assert kwargs is not None and "dir" in kwargs


@pytest.mark.parametrize("name", li.RICH_BAR_OVERRIDES)
def test_rich_bar_methods_runner_overrides_exist(name: str) -> None:
    assert callable(getattr(RichProgressBar, name, None)), name


def test_lightning_version_is_in_the_supported_range() -> None:
    major, minor = (int(x) for x in L.__version__.split(".")[:2])
    assert (major, minor) >= (2, 5)


def test_no_other_runner_module_imports_a_private_lightning_name() -> None:
    private = re.compile(r"^\s*(from\s+lightning[\w.]*\s+import\s+.*\b_[A-Za-z]|"
                         r"from\s+lightning[\w.]*\._|import\s+lightning[\w.]*\._)", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "runner").rglob("*.py")
                 if p.name != "lightning_internals.py" and private.search(p.read_text())]
    assert offenders == []
