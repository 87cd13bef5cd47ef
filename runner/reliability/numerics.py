"""A nan/inf training loss stops the run (last good state checkpointed) or skips that step.

The loss is checked in ``on_before_backward``, which Lightning calls for every micro-batch (runner's
strategy calls it too when the compiled step already ran backward). At that point the optimizer has
not stepped, so the weights and optimizer state are still the last good ones:

* ``stop``: save them to ``last.ckpt`` and raise ``NonFiniteLossError`` naming the step.
* ``skip``: let backward run, then skip the optimizer step (``_SkipStep`` raised from inside the
  optimizer closure, caught around ``LightningModule.optimizer_step``): no update and no
  optimizer-state change. ``global_step`` still advances (Lightning counts the step once the hook
  returns), so step numbers stay aligned with the data and ``max_steps`` counts skipped steps.
  Gradients are zeroed before the next step as usual. After ``max_skipped_steps`` skips the run
  stops as with ``stop``.

Under DDP every rank takes the same decision: the non-finite flag is all-reduced (max) over the
ranks before anyone acts on it. A decision per rank would let the rank with the bad loss stop at the
checkpoint barrier while the others wait in backward's gradient all-reduce (a hang), or skip its
update while the others apply gradients that the all-reduce made non-finite (diverged weights). So
a nan on any rank stops every rank (all save through the same collective ``save_checkpoint``, rank
0 writes) or skips the step on every rank.

The check costs one device sync per micro-batch (the flag's ``.item()``), plus one small all-reduce
per micro-batch under DDP; logging the loss syncs anyway.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from runner.config.schema import OnNonFinite
from runner.errors import RunStopped

log = logging.getLogger(__name__)


class NonFiniteLossError(RunStopped):
    """The training loss was nan or inf; the message names the step and the saved checkpoint."""

    exit_code = 4


class _SkipStep(Exception):
    """Raised inside the optimizer closure to skip one optimizer step."""


_KINDS = {1: "inf", 2: "nan"}  # the flag's values: 0 finite; the worst (max) wins across ranks


def nonfinite_flag(loss: torch.Tensor) -> torch.Tensor:
    """0 (finite), 1 (inf) or 2 (nan), as a tensor on the loss's device (no host sync yet)."""
    nan = torch.isnan(loss).any()
    inf = torch.isinf(loss).any()
    return 2 * nan.long() + (inf & ~nan).long()


def agreed_flag(trainer: L.Trainer, local: torch.Tensor) -> int:
    """The worst flag over all ranks (every rank gets the same answer); ``local`` itself with one
    process or no initialised process group."""
    if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        # torch's all_reduce, not strategy.reduce: Lightning's adds a barrier (a second collective).
        local = local.clone()
        torch.distributed.all_reduce(local, op=torch.distributed.ReduceOp.MAX)
    return int(local.item())


def _finite(loss: torch.Tensor) -> bool:
    # A scalar loss is read once (no isfinite/all kernels to launch); anything else is reduced first.
    return math.isfinite(loss.item()) if loss.numel() == 1 else bool(torch.isfinite(loss).all())


class NonFiniteGuard(Callback):
    """Stops or skips on a non-finite loss (see the module docstring)."""

    def __init__(self, policy: OnNonFinite, ckpt_path: Path, max_skipped_steps: int = 10) -> None:
        self.policy = policy
        self.ckpt_path = ckpt_path
        self.max_skipped_steps = max_skipped_steps
        self.skipped: list[int] = []
        """1-based numbers of the steps skipped."""
        self._bad: tuple[str, int] | None = None
        """(nan|inf, 1-based step) of a non-finite micro-batch since the last optimizer step."""
        self._original_step: Callable[..., Any] | None = None

    # -- wiring --------------------------------------------------------------------------------
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.policy is OnNonFinite.skip:
            self._original_step = pl_module.optimizer_step
            pl_module.optimizer_step = self._guarded_optimizer_step  # type: ignore[method-assign]

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._original_step is not None:
            vars(pl_module).pop("optimizer_step", None)
            self._original_step = None

    # -- the check -----------------------------------------------------------------------------
    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        loss = loss.detach()
        if trainer.world_size <= 1 and _finite(loss):
            return  # the common case: nan and inf are told apart only when one occurs
        local = nonfinite_flag(loss)
        flag = agreed_flag(trainer, local)
        if flag == 0:
            return
        step = trainer.global_step + 1
        kind = _KINDS[flag]
        if trainer.world_size > 1:
            mine = int(local.item())
            kind += f" on rank {trainer.global_rank}" if mine else " on another rank"
        if self.policy is OnNonFinite.stop or len(self.skipped) >= self.max_skipped_steps:
            self._stop(trainer, step, kind)
        self._bad = (kind, step)

    def _stop(self, trainer: L.Trainer, step: int, kind: str) -> None:
        trainer.save_checkpoint(self.ckpt_path)
        skipped = f" after skipping {len(self.skipped)} steps ({self.skipped})" if self.skipped else ""
        raise NonFiniteLossError(
            f"non-finite training loss ({kind}) at step {step}{skipped}. The last good state (after step "
            f"{step - 1}, before this step's update) is saved to {self.ckpt_path}. Fix: lower optimizer.lr or "
            "keep trainer.gradient_clip_val set, check the data near this step, then resume with ckpt_path=last "
            "in the same run dir; or set reliability.on_nonfinite=skip to drop such steps."
        )

    def _guarded_optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any,
                                optimizer_closure: Callable[[], Any] | None = None) -> None:
        assert self._original_step is not None

        def closure() -> Any:
            out = optimizer_closure() if optimizer_closure is not None else None
            if self._bad is not None:  # any micro-batch since the last step was non-finite
                raise _SkipStep
            return out

        try:
            self._original_step(epoch, batch_idx, optimizer, closure)
        except _SkipStep:
            assert self._bad is not None
            kind, step = self._bad
            self.skipped.append(step)
            log.warning("non-finite training loss (%s) at step %d: step skipped (%d of at most %d)",
                        kind, step, len(self.skipped), self.max_skipped_steps)
        finally:
            self._bad = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.policy is OnNonFinite.skip:
            pl_module.log("reliability/skipped_steps", float(len(self.skipped)), on_step=True, on_epoch=False)

    def figures(self) -> dict[str, Any]:
        return {"reliability/skipped_steps": list(self.skipped)} if self.policy is OnNonFinite.skip else {}

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": list(self.skipped)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped = list(state_dict.get("skipped", []))
