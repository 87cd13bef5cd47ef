"""A small MLP classifier: the fastest model to compile, for plumbing checks."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """``depth`` hidden layers of width ``hidden`` with GELU; logits over ``out_features`` classes."""

    def __init__(self, in_features: int = 32, hidden: int = 256, depth: int = 4, out_features: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))
