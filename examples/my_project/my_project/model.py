"""A byte-level language model of this project's own: causal convolutions instead of attention.

runner trains any ``nn.Module`` that maps a batch of token ids ``[batch, time]`` to logits
``[batch, time, vocab]``; ``conf/model/conv_lm.yaml`` selects this one by ``_target_``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvLM(nn.Module):
    """Embedding, ``depth`` residual causal convolutions of width ``width``, a linear head."""

    def __init__(self, vocab_size: int = 256, width: int = 64, depth: int = 3, kernel_size: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.blocks = nn.ModuleList(nn.Conv1d(width, width, kernel_size) for _ in range(depth))
        self.head = nn.Linear(width, vocab_size)
        self.left_pad = kernel_size - 1  # position t sees positions <= t, never the future it predicts

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx).transpose(1, 2)  # [batch, width, time]
        for conv in self.blocks:
            x = x + F.gelu(conv(F.pad(x, (self.left_pad, 0))))
        return self.head(x.transpose(1, 2))
