"""Compile caches are kept per CPU instruction set: torch's Inductor cache key does not cover it, and a
cache filled with AVX-512 code read through the AVX2 path computed NaN losses (measured 2026-11-24)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from runner.stack.caches import load_artifacts
from runner.torch_internals import settings


def test_a_configured_cache_dir_is_keyed_by_the_instruction_set(tmp_path: Path) -> None:
    keyed = settings.machine_cache_dir(str(tmp_path))
    assert Path(keyed).parent == tmp_path and settings.cpu_capability().lower() in Path(keyed).name


def test_the_compile_stack_points_inductor_at_the_keyed_dir(tmp_path: Path) -> None:
    import lightning as L

    from runner.config.schema import CompileConfig
    from runner.strategy import CompileStrategy
    from tests.test_lightning_semantics import Base
    from tests.zoo.data import VectorsDataModule

    seen: list[str | None] = []

    class Peek(L.Callback):
        def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            seen.append(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))

    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    strategy = CompileStrategy(compile=CompileConfig(backend="eager", cache_dir=str(tmp_path)), device="cpu")
    L.Trainer(strategy=strategy, max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              callbacks=[Peek()], limit_val_batches=0).fit(Base(), VectorsDataModule())
    assert seen == [settings.machine_cache_dir(str(tmp_path))]
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == before  # restored at teardown


def test_artifacts_from_another_instruction_set_are_not_loaded(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "compile_cache.bin"
    path.write_bytes(b"not read")
    path.with_suffix(".json").write_text(json.dumps({"torch": "x", "cpu": "NOT-THIS-ONE"}))
    with caplog.at_level(logging.WARNING):
        assert load_artifacts(path) == {}
    assert "not loaded" in caplog.text
