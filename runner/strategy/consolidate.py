"""One plain state dict from a sharded model: what a user loads into an eager model for inference or
fine-tuning, with no ``DTensor``, no ``_orig_mod.`` and no ``_checkpoint_wrapped_module.`` in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from runner.atomic_files import atomic_write


def full_state_dict(module: nn.Module) -> dict[str, Any]:
    """The module's whole state gathered to plain CPU tensors on rank 0 (empty on other ranks).
    A collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


class ConsolidatedCheckpoint(Callback):
    """At the end of fit, writes ``path``: the LightningModule's full state dict, loadable with
    ``module.load_state_dict(torch.load(path), strict=True)`` into the eager module."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._figures: dict[str, Any] = {}

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        state = full_state_dict(pl_module)
        if trainer.is_global_zero:
            atomic_write(self.path, lambda f: torch.save(state, f))  # never a half-written file at path
        self._figures = {"fsdp/consolidated_checkpoint": str(self.path)}

    def figures(self) -> dict[str, Any]:
        return dict(self._figures)
