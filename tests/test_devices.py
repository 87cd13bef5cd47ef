"""The device a run uses is the one the user named: ``trainer=gpu``, ``trainer.devices=[k]``, ``mps``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runner.config import compose
from runner.config.schema import TrainerConfig
from runner.strategy import CompileStrategy


@pytest.mark.parametrize(("accelerator", "devices", "device"), [
    ("cpu", 1, "cpu"),
    ("cuda", 1, "cuda:0"),
    ("gpu", [1], "cuda:1"),
    ("cuda", [3], "cuda:3"),
    ("mps", 1, "mps"),
])
def test_single_device_is_the_one_named(accelerator: str, devices: object, device: str) -> None:
    assert TrainerConfig(accelerator=accelerator, devices=devices).single_device() == device


@pytest.mark.parametrize(("devices", "distributed"), [(1, False), (2, True), ([1], False), ([0, 1], True), (-1, True)])
def test_several_devices_mean_ddp(devices: object, distributed: bool) -> None:
    assert TrainerConfig(accelerator="cuda", devices=devices).is_distributed() is distributed


def test_gpu_trainer_option_composes(tmp_path: Path) -> None:
    cfg = compose(["+recipe=smoke", "trainer=gpu", "trainer.devices=[1]"], run_dir=str(tmp_path))
    assert cfg.trainer.accelerator == "cuda" and cfg.trainer.precision == "bf16-mixed"
    assert TrainerConfig(accelerator=cfg.trainer.accelerator, devices=list(cfg.trainer.devices)).single_device() \
        == "cuda:1"


@pytest.mark.parametrize(("given", "root"), [("cuda", "cuda:0"), (torch.device("cuda"), "cuda:0"), ("cuda:2", "cuda:2"),
                                             ("cpu", "cpu")])
def test_compile_strategy_gives_a_bare_cuda_device_an_index(given: object, root: str) -> None:
    # Lightning's CUDA accelerator calls torch.cuda.set_device(root_device), which raises for "cuda" without an index:
    # the first GPU benchmark's runner contestants (CompileStrategy(device="cuda")) failed in setup_environment.
    assert CompileStrategy(device=given).root_device == torch.device(root)
