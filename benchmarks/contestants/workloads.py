"""The models and data ``compare.py``'s contestants race on: the quickstart GPT on the stdlib's bytes, a deep narrow
MLP (many small parameter tensors), the ``overhead`` model (a step that is nearly all framework), and the model
families of ``contestants/family_workloads.py``. Every contestant builds its own copy from the same seed and draws
the same batches."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.utils.data import TensorDataset

from contestants.workload import Workload  # benchmarks/ on sys.path: run as a script
from runner.models.gpt import GPT


class ResidualBlock(nn.Module):
    """``x + gelu(fc(norm(x)))``: four small parameter tensors."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.gelu(self.fc(self.norm(x)))


class ManyParams(nn.Module):
    """A deep, narrow residual MLP: ``4 * depth + 4`` parameter tensors, so the optimizer step and
    the per-op overhead matter as much as the matmuls."""

    def __init__(self, in_features: int = 32, width: int = 128, depth: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.inp = nn.Linear(in_features, width)
        self.blocks = nn.ModuleList(ResidualBlock(width) for _ in range(depth))
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def gpt_workload(n_layer: int, n_embd: int, n_head: int, seq_len: int, batch: int, max_bytes: int) -> Workload:
    """The quickstart GPT on packed windows of the stdlib source (``TextDataModule``)."""
    from runner.data.text import TextDataModule

    dm = TextDataModule(seq_len=seq_len, batch_size=batch, max_bytes=max_bytes)
    dm.setup("fit")
    make = partial(GPT, n_layer=n_layer, n_embd=n_embd, n_head=n_head, block_size=seq_len)
    return Workload("gpt", f"GPT {n_layer}x{n_embd}, {n_head} heads, seq {seq_len}, batch {batch}", make,
                    dm.train_dataloader().dataset, batch)


def many_params_workload(width: int, depth: int, batch: int, samples: int = 32768, name: str = "many_params",
                         turn_scale: int = 1) -> Workload:
    """``ManyParams`` on a fixed random classification set, large enough that a race stays within one
    epoch: from the second epoch on, Lightning draws a different shuffle than a plain loop re-iterating
    the same DataLoader, and the hand-written loop would train on other batches."""
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(samples, 32, generator=g), torch.randint(0, 10, (samples,), generator=g))
    make = partial(ManyParams, width=width, depth=depth)
    n = sum(1 for _ in make().parameters())
    return Workload(name, f"residual MLP {depth}x{width}, {n} parameter tensors, batch {batch}", make,
                    data, batch, turn_scale)


def workloads(names: list[str], quick: bool) -> list[Workload]:
    """Full sizes: the quickstart GPT (``GPT()`` defaults, seq 256, batch 16), a 50-deep MLP (204 tensors),
    and ``overhead``: a one-block MLP of width 4 whose step is nearly all framework."""
    from contestants.family_workloads import FAMILIES, family_workload  # Workload from contestants/workload.py

    out = []
    for name in names:
        if name in FAMILIES:  # families.py's: transformers and timm models
            out.append(family_workload(name, quick))
        elif name == "llama_peft":  # lora_qlora.py's: LoRA and full fine-tunes of one Llama-style model
            from contestants.adapters import CPU, CPU_QUICK, llama_workload  # Workload from contestants/workload.py

            out.append(llama_workload(CPU_QUICK if quick else CPU, 20_000 if quick else 4_000_000))
        elif name.startswith("vocab_"):  # vocab.py's: a large vocabulary, whole or chunked logits
            from contestants.vocab import vocab_workload  # Workload from contestants/workload.py

            out.append(vocab_workload(name, quick))
        elif name in ("gpt", "gpt_bf16"):
            sizes = (1, 16, 2, 16, 2, 20_000) if quick else (4, 128, 4, 256, 16, 4_000_000)
            work = gpt_workload(*sizes)
            if name == "gpt_bf16":
                work.name, work.describe = name, work.describe + ", bf16-mixed"
            out.append(work)
        elif name == "many_params":
            out.append(many_params_workload(*((8, 4, 4) if quick else (128, 50, 256))))
        else:
            # Framework cost alone: a step of a few microseconds of compute, so what is left is each
            # tool's per-step machinery (hooks, closure, logging, guards). Many steps per turn.
            out.append(many_params_workload(4, 1, 4, samples=16384, name="overhead", turn_scale=1 if quick else 20))
    return out
