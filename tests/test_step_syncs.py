"""No host read of a device value on a training step that neither logs nor measures.

On a GPU every read of a device value (``Tensor.item``, ``tolist``, ``cpu``, ``bool``/``float``/``int`` of a
tensor, ``torch.cuda.synchronize``, waiting on an event or stream) blocks the host until the device has
drained its queue: one per step costs a GPU run its overlap of launches with compute. On the CPU such a
read waits for nothing, but the same calls are made on the same code path, so these tests count the
calls on a CPU fit, per training step, with the place each came from, and assert that steps between two
log steps make none.

The one read kept on the CPU by design is the non-finite guard's (``runner.reliability.numerics``): it
reads the loss flag every step where that waits for nothing, and every ``log_every_n_steps`` on a GPU
(``check_every_for``; ``tests/test_reliability_units.py`` pins that interval).
"""

from __future__ import annotations

import collections
import contextlib
import os
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn

import runner
from runner.config.composing.loading import compose, load
from runner.run import run

LOG_EVERY = 4
STEPS = 12
_TENSOR_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")
_CUDA_WAITS = ((torch.cuda, "synchronize"), (torch.cuda.Event, "synchronize"), (torch.cuda.Event, "query"),
               (torch.cuda.Event, "elapsed_time"), (torch.cuda.Stream, "synchronize"))
GUARD = os.path.join("runner", "reliability", "numerics.py")


class HostReads(L.Callback):
    """Counts host reads of tensors, per training step: from one ``on_train_batch_start`` to the next
    (the progress bar, the loggers and every other callback of the step included). Each read is kept
    with the runner or Lightning frames it came from."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.reads: dict[int, list[str]] = collections.defaultdict(list)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, i: int) -> None:
        self.step = trainer.global_step

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.step = None

    def seen(self, name: str) -> None:
        if self.step is None:
            return
        frames = [f for f in traceback.extract_stack()[:-2] if "site-packages/torch/" not in f.filename]
        where = " <- ".join(f"{f.filename}:{f.lineno}:{f.name}" for f in reversed(frames[-8:]))
        self.reads[self.step].append(f"{name}: {where}")

    @contextlib.contextmanager
    def counting(self) -> Iterator[HostReads]:
        """Wrap every host read of a tensor and every CUDA wait for the duration."""
        saved = [(torch.Tensor, n, getattr(torch.Tensor, n)) for n in _TENSOR_READS]
        saved += [(owner, n, getattr(owner, n)) for owner, n in _CUDA_WAITS]

        def counted(name: str, original: Any) -> Any:
            def read(*args: Any, **kwargs: Any) -> Any:
                self.seen(name)
                return original(*args, **kwargs)
            return read

        for owner, name, original in saved:
            setattr(owner, name, counted(name, original))
        try:
            yield self
        finally:
            for owner, name, original in saved:
                setattr(owner, name, original)

    def between_log_steps(self) -> dict[int, list[str]]:
        """The reads of every step after which Lightning logs nothing (global step after it not a
        multiple of ``LOG_EVERY``), the first step (it compiles) left out."""
        return {step: self.reads.get(step, []) for step in range(1, STEPS) if (step + 1) % LOG_EVERY}


def test_runner_fit_reads_nothing_from_the_device_between_log_steps(tmp_path: Path) -> None:
    # The quickstart's callbacks (progress bar, checkpoints, LR monitor, telemetry, reliability) on the
    # smoke model; validation and checkpoints on log steps; no speedup pairs (those steps measure).
    cfg = load(compose(["+recipe=smoke", f"trainer.max_steps={STEPS}", f"trainer.log_every_n_steps={LOG_EVERY}",
                        f"telemetry.log_every_n_steps={LOG_EVERY}", "trainer.val_check_interval=8",
                        "trainer.checkpoint_every_n_steps=8", "telemetry.speedup_steps=0",
                        "trainer.enable_progress_bar=true"], run_dir=str(tmp_path / "run")))
    reads = HostReads()
    with reads.counting():
        result = run(cfg, extra_callbacks=[reads])
    assert result.figures["compile/graph_breaks"] == 0  # counting did not change what compiled
    quiet = reads.between_log_steps()
    assert len(quiet) == 8  # steps 1, 2, 4, 5, 6, 8, 9, 10
    for step, seen in quiet.items():
        # On the CPU the non-finite guard reads its flag once a step, by design; nothing else may.
        others = [r for r in seen if GUARD not in r]
        assert others == [], f"step {step} read the device {len(others)} times:\n" + "\n".join(others)
        assert len(seen) == 1, seen
    # The log steps do read (Lightning's loggers, the progress bar's loss): the counter sees reads.
    assert any(len(reads.reads[step]) > 1 for step in range(LOG_EVERY - 1, STEPS, LOG_EVERY))
    assert "train/loss" in (tmp_path / "run" / "csv" / "metrics.csv").read_text()


class _UserModule(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def test_compile_strategy_in_a_users_trainer_reads_nothing_between_log_steps(tmp_path: Path) -> None:
    data = torch.utils.data.TensorDataset(torch.randn(STEPS * 8, 16), torch.randint(0, 4, (STEPS * 8,)))
    reads = HostReads()
    strategy = runner.CompileStrategy(compile=runner.CompileConfig(backend="eager"))
    trainer = L.Trainer(strategy=strategy, max_steps=STEPS, log_every_n_steps=LOG_EVERY, callbacks=[reads],
                        default_root_dir=tmp_path, enable_checkpointing=False, enable_model_summary=False)
    with reads.counting():
        trainer.fit(_UserModule(), torch.utils.data.DataLoader(data, batch_size=8))
    assert strategy.figures()["compile/frames"] == 1
    for step, seen in reads.between_log_steps().items():
        assert seen == [], f"step {step} read the device {len(seen)} times:\n" + "\n".join(seen)
