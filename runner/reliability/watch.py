"""``CompileErrorCallback``: the ``CompileErrorWatch`` for the length of ``Trainer.fit``."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from runner.reliability.compile_errors import CompileErrorWatch


class CompileErrorCallback(Callback):
    """Listens for recompile-limit hits and eager fallbacks while fitting (see ``compile_errors``)."""

    def __init__(self, on_error: Any) -> None:
        self.on_error = on_error
        self.watch = CompileErrorWatch()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.watch.attach(self.on_error)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.watch.detach()

    def figures(self) -> dict[str, Any]:
        return self.watch.figures()
