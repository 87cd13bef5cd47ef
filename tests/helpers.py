"""Small real training setups shared by the tests (tiny GPT on real stdlib text, CPU)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from runner.config.schema import Background, CompileConfig, OptimizerPolicy, Scope
from runner.data.resumable import make_resumable
from runner.data.text import TextDataModule
from runner.models.gpt import GPT
from runner.strategy import CompileStrategy
from runner.training.module import TrainModule
from runner.training.schedules import warmup_cosine


class LossRecorder(Callback):
    """Records the training loss of every step."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.losses.append(float(outputs["loss"]))


def tiny_module(seed: int = 0) -> TrainModule:
    torch.manual_seed(seed)
    return TrainModule(
        GPT(n_layer=2, n_embd=32, n_head=2, block_size=32),
        optimizer=partial(torch.optim.AdamW, lr=3e-3, weight_decay=0.1),
        scheduler=partial(warmup_cosine, warmup_steps=3, total_steps=20),
    )


def tiny_data(**kwargs: Any) -> TextDataModule:
    """Resumable, as ``python -m runner`` makes it: a mid-epoch resume continues at the same batch."""
    dm = TextDataModule(**{"seq_len": 32, "batch_size": 4, "max_bytes": 100_000, **kwargs})
    make_resumable(dm)
    return dm


def fit_losses(scope: Scope = Scope.none, backend: str = "aot_eager", optimizer: OptimizerPolicy = OptimizerPolicy.none,
               steps: int = 20, **trainer_kwargs: Any) -> tuple[list[float], CompileStrategy, TrainModule]:
    """Train the tiny GPT for ``steps`` through CompileStrategy; return per-step losses."""
    module = tiny_module()
    # Compiled from the first step: these fits are about the compiled step (compile.background=auto would keep
    # a short Inductor fit eager while a compile process runs beside it).
    cfg = CompileConfig(scope=scope, backend=backend, optimizer=optimizer, background=Background.disabled)
    strategy = CompileStrategy(compile=cfg, device="cpu")
    rec = LossRecorder()
    kwargs: dict[str, Any] = dict(max_steps=steps, logger=False, enable_checkpointing=False,
                                  enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                                  gradient_clip_val=1.0)
    kwargs.update(trainer_kwargs)
    trainer = L.Trainer(strategy=strategy, callbacks=[rec, *kwargs.pop("callbacks", [])], **kwargs)
    trainer.fit(module, tiny_data())
    return rec.losses, strategy, module


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a process group or a server of a test's own)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A real ``redis-server`` of the caller's own (Debian's package: ``.ci/run`` installs it) on a free
    localhost port, nothing persisted; yields its address and stops it afterwards. Skips without one."""
    import pytest

    from runner.stack.caches import ping

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian's redis-server package; .ci/run installs it)")
    port = free_port()
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                               "--dir", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    try:
        while ping(url) is not None:
            assert server.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
