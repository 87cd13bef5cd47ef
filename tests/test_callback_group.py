"""``CallbackGroup``: runner's own callbacks behind one, each hook forwarded only to the members that
implement it; each member's checkpoint state kept, and read from checkpoints written before the group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from runner.lightning_step.callback_group import CallbackGroup, find_callback
from tests.helpers import tiny_data, tiny_module


class Counter(Callback):
    """Counts its training batches and keeps the count in the checkpoint."""

    def __init__(self) -> None:
        self.batches = 0
        self.restored: int | None = None

    def on_train_batch_end(self, *args: Any) -> None:
        self.batches += 1

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.restored = state_dict["batches"]


class Starts(Callback):
    def __init__(self) -> None:
        self.starts = 0

    def on_train_start(self, *args: Any) -> None:
        self.starts += 1


def _fit(tmp_path: Path, callbacks: list[Callback], steps: int, ckpt: str | None = None) -> L.Trainer:
    trainer = L.Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, default_root_dir=tmp_path, callbacks=callbacks,
                        enable_checkpointing=False)
    trainer.fit(tiny_module(), tiny_data(), ckpt_path=ckpt)
    return trainer


def test_each_hook_reaches_only_the_members_that_implement_it(tmp_path: Path) -> None:
    counter, starts = Counter(), Starts()
    group = CallbackGroup(counter, starts)
    assert group.on_train_batch_end == counter.on_train_batch_end  # one member: called directly, no fan-out
    assert "on_train_batch_start" not in vars(group)  # nobody implements it: Lightning's no-op
    trainer = _fit(tmp_path, [group], steps=5)
    assert (counter.batches, starts.starts) == (5, 1)
    assert find_callback(trainer, Starts) is starts and find_callback(trainer, torch.nn.Module) is None


def test_members_keep_their_checkpoint_state_and_read_old_checkpoints(tmp_path: Path) -> None:
    trainer = _fit(tmp_path, [CallbackGroup(Counter(), Starts())], steps=3)
    trainer.save_checkpoint(tmp_path / "group.ckpt")
    resumed = Counter()
    _fit(tmp_path, [CallbackGroup(resumed, Starts())], steps=4, ckpt=str(tmp_path / "group.ckpt"))
    assert resumed.restored == 3
    alone = _fit(tmp_path, [Counter()], steps=2)  # a checkpoint from before the group: the member at the top
    alone.save_checkpoint(tmp_path / "alone.ckpt")
    upgraded = Counter()
    _fit(tmp_path, [CallbackGroup(upgraded)], steps=3, ckpt=str(tmp_path / "alone.ckpt"))
    assert upgraded.restored == 2
