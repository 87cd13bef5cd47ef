"""What one workload of ``compare.py``'s race is: a model recipe and the batches every contestant trains it on. Its
own module, below the workloads (``workloads.py``, ``family_workloads.py``, ``lora_qlora.py`` of this folder) and the
contestants that train them, so that each imports it and none imports another's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


@dataclass
class Workload:
    """A model recipe and the batches every contestant trains it on."""

    name: str
    describe: str
    make_model: Callable[[], nn.Module]
    dataset: Dataset[Any]
    batch_size: int
    turn_scale: int = 1
    """Timed steps per turn, as a multiple of ``--turn`` (tiny steps need more of them per round)."""

    def model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return self.make_model()

    def loader(self, seed: int) -> DataLoader[Any]:
        g = torch.Generator().manual_seed(seed)
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True, drop_last=True, generator=g)
