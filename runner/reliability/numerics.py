"""A nan/inf training loss stops the run or skips that step, read from the device only when a decision is due.

Each micro-batch's loss is copied on its device (no host sync); the flag is read every optimizer step for ``skip``,
every ``check_every`` steps, before each checkpoint and at the end for ``stop``, so no checkpoint holds weights
updated with a non-finite loss. Under DDP the flag is all-reduced first, so every rank acts alike at the same step."""

from __future__ import annotations

import functools
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
from runner.metrics import counted
from runner.stack import stack_of


def nonfinite_flag(loss: torch.Tensor) -> torch.Tensor:
    """0 (finite), 1 (inf) or 2 (nan), as a tensor on the loss's device (no host sync yet)."""
    nan = torch.isnan(loss).any()
    inf = torch.isinf(loss).any()
    return 2 * nan.long() + (inf & ~nan).long()


def _stacked(losses: list[tuple[int, torch.Tensor]]) -> torch.Tensor:
    """The scalar losses as one tensor in their promoted dtype (never narrowed: a finite float64 1e300 would be
    inf as float32)."""
    dtype = functools.reduce(torch.promote_types, (loss.dtype for _, loss in losses))
    return torch.stack([loss.reshape(()).to(dtype) for _, loss in losses])


def pending_flags(losses: list[tuple[int, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The worst flag of the kept ``(step, loss)`` pairs and the first step whose flag is not 0 (0 when none), as
    device scalars: a few ops for the whole interval instead of a dozen per micro-batch."""
    if all(loss.numel() == 1 for _, loss in losses):
        values = _stacked(losses)
        nan, inf = torch.isnan(values), torch.isinf(values)
        flags = 2 * nan.long() + (inf & ~nan).long()
    else:
        flags = torch.stack([nonfinite_flag(loss) for _, loss in losses])
    steps = torch.tensor([step for step, _ in losses], device=flags.device)
    never = torch.iinfo(torch.long).max
    first = torch.where(flags > 0, steps, never).min()
    return flags.max(), torch.where(first == never, 0, first)


def host_flags(losses: list[tuple[int, torch.Tensor]]) -> tuple[int, int]:
    """:func:`pending_flags` for scalar CPU losses, read at once (one ``tolist``) and checked in Python, in
    their own dtype's values (promoted, never narrowed)."""
    values = _stacked(losses).tolist()
    flags = [2 if math.isnan(v) else 1 if math.isinf(v) else 0 for v in values]
    first = next((step for (step, _), f in zip(losses, flags, strict=True) if f), 0)
    return max(flags), first


def fold_flags(earlier: tuple[torch.Tensor, torch.Tensor] | None,
               later: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Two ``(worst flag, first bad step)`` pairs of consecutive intervals as one (device ops only)."""
    if earlier is None:
        return later
    return torch.maximum(earlier[0], later[0]), torch.where(earlier[1] > 0, earlier[1], later[1])


log = logging.getLogger(__name__)


class NonFiniteLossError(RunStopped):
    """The training loss was nan or inf; the message names the step and the saved checkpoint."""

    exit_code = 4


class _SkipStep(Exception):
    """Raised inside the optimizer closure to skip one optimizer step."""


FOLD_EVERY = 32  # Loss copies kept before they are folded into one running (flag, first step) pair on the device.
_KINDS = {1: "inf", 2: "nan"}  # the flag's values: 0 finite; the worst (max) wins across ranks


def agreed_flag(trainer: L.Trainer, local: torch.Tensor) -> int:
    """The worst flag over all ranks (every rank gets the same answer); ``local`` itself with one
    process or no initialised process group."""
    return int(agreed_values(trainer, local.reshape(1))[0])


def agreed_values(trainer: L.Trainer, local: torch.Tensor) -> list[int]:
    """``local`` (a 1-d integer tensor) reduced with max over all ranks, read to the host: one sync, and
    one all-reduce under several processes."""
    if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        # torch's all_reduce, not strategy.reduce: Lightning's adds a barrier (a second collective).
        local = local.clone()
        torch.distributed.all_reduce(local, op=torch.distributed.ReduceOp.MAX)
    return [int(v) for v in local.tolist()]


def check_every_for(device: torch.device, log_every_n_steps: int) -> int:
    """Steps between reads of a per-step device flag: 1 on the CPU (a read waits for nothing), else the
    logging interval (where values are read anyway)."""
    return 1 if device.type == "cpu" else max(1, int(log_every_n_steps))


class NonFiniteGuard(Callback):
    """Stops or skips on a non-finite loss; under ``compile.optimizer=graphed`` ``skip`` is handed to the step.
    ``check_every``: optimizer steps between reads under ``stop`` (None: :func:`check_every_for`)."""

    def __init__(self, policy: OnNonFinite, ckpt_path: Path, max_skipped_steps: int = 10,
                 check_every: int | None = None) -> None:
        self.policy = policy
        self.ckpt_path = ckpt_path
        self.max_skipped_steps = max_skipped_steps
        self.check_every = check_every
        self.skipped: list[int] = []  # 1-based numbers of the steps skipped.
        self.reads = 0  # Times the flag was read from the device (each one sync, and one all-reduce under DDP).
        self._every = check_every or 1
        self._policy = policy  # what the guard does in this fit (skip becomes stop under manual optimization)
        # (1-based step, loss copy) of every micro-batch since the last fold, at most FOLD_EVERY of them, and
        # what the folded ones came to: the guard holds a bounded amount however long nothing reads it.
        self._losses: list[tuple[int, torch.Tensor]] = []
        self._folded: tuple[torch.Tensor, torch.Tensor] | None = None
        self._read_at: int | None = None  # the global step of the last read under stop
        self._saved_at: int | None = None  # the global step of the newest checkpoint written
        self._saving = False
        self._trainer: L.Trainer | None = None
        self._original_step: Callable[..., Any] | None = None
        # Skip handed to a graph-safe optimizer step: the stack's ``GraphSafeStep``
        # (``CompileStack.skip_nonfinite_on_device``), the device skips already logged, the steps skipped before this
        # fit (a resumed guard's state), and whether it is saving the last good state (its own save reads nothing).
        self._device: Any = None
        self._seen = self._before = 0
        self._stopping = False

    # Its ``on_before_optimizer_step`` reads its own loss copies, never a gradient: a graph-safe optimizer step runs
    # beside it.
    leaves_gradients_alone = True

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._every = self.check_every or check_every_for(trainer.strategy.root_device,
                                                          getattr(trainer, "log_every_n_steps", 50))
        self._losses, self._folded = [], None
        self._trainer = trainer
        self._policy = self.policy
        if self.policy is OnNonFinite.skip and not pl_module.automatic_optimization:
            # Skipping happens inside LightningModule.optimizer_step, which manual optimization never calls.
            self._policy = OnNonFinite.stop
            log.warning("reliability.on_nonfinite=skip: %s steps its optimizers itself (manual optimization), "
                        "so no step can be skipped for it; a non-finite loss stops the run instead, as with "
                        "reliability.on_nonfinite=stop", type(pl_module).__name__)
        self._device, self._seen, self._stopping = None, 0, False
        if self._policy is OnNonFinite.skip:
            stack = stack_of(trainer)
            step = stack.skip_nonfinite_on_device(self.max_skipped_steps + 1) if stack is not None else None
            if step is not None:  # the graph-safe step skips on the device: no read before every update
                self._device = step
                return
            self._original_step = pl_module.optimizer_step
            pl_module.optimizer_step = self._guarded_optimizer_step  # type: ignore[method-assign]

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._device is not None:  # it counts steps from here
            self._device.count_from(trainer.global_step)
            self._before = len(self.skipped)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = None
        if self._original_step is not None:
            vars(pl_module).pop("optimizer_step", None)
            self._original_step = None

    # -- on the device: no host sync -------------------------------------------------------------
    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        if self._device is not None:
            return  # the optimizer step flags non-finite gradients itself
        self._losses.append((trainer.global_step + 1, loss.detach().clone()))
        if len(self._losses) >= FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        if self._losses:
            self._folded = fold_flags(self._folded, pending_flags(self._losses))
            self._losses = []

    # -- reads: when a decision is due ---------------------------------------------------------
    def _read(self, trainer: L.Trainer) -> tuple[int, int, bool]:
        """(agreed flag, first bad step over the ranks, whether this rank saw it); forgets the losses."""
        if self._folded is None and trainer.world_size == 1 and self._losses and \
                all(loss.device.type == "cpu" and loss.numel() == 1 for _, loss in self._losses):
            # One process on the CPU, where reading a value waits for nothing: one read, Python's checks, in
            # place of the dozen small tensor ops the device path needs (about 60 us per step here).
            host_flag, host_first = host_flags(self._losses)
            self._losses = []
            self.reads += 1
            return host_flag, host_first, host_flag > 0
        self._fold()
        if self._folded is None:
            return 0, 0, False
        (local, first), self._folded = self._folded, None
        self.reads += 1
        # One reduction for both: max of the flag, and max of -step (the earliest bad step) where bad.
        neg_first = torch.where(first > 0, -first, torch.iinfo(torch.long).min)
        flag, worst_first = agreed_values(trainer, torch.stack([local, neg_first]))
        return flag, -worst_first if flag else 0, flag > 0 and bool(local.item() > 0)

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        step = trainer.global_step + 1
        if self._device is not None and step % self._every == 0 and self._read_at != step:
            self._read_at = step
            self._read_device(trainer)
        if self._policy is not OnNonFinite.stop or step % self._every or self._read_at == step:
            return
        self._read_at = step
        self._decide(trainer, *self._read(trainer))

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Never write weights updated with a non-finite loss. Under skip every update was read before it
        # ran (what is pending belongs to the step under way); this guard's own save is the last good state.
        if self._policy is OnNonFinite.stop and not self._saving:
            self._decide(trainer, *self._read(trainer))
        self._read_device(trainer)
        self._saved_at = trainer.global_step

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._read_device(trainer)
        if self._policy is OnNonFinite.stop:  # a non-finite loss in the last steps stops the run too
            self._decide(trainer, *self._read(trainer))

    def _read_device(self, trainer: L.Trainer) -> None:
        """Read the graph-safe step's record (one host read): each newly skipped step (1-based) appended to
        ``skipped`` and logged; past ``max_skipped_steps`` the last good state is saved and the run stopped."""
        if self._device is None:
            return
        self.reads += 1
        if self._stopping:
            return
        count, at = self._device.read_skips()
        for i in range(self._seen, count):
            number = at[min(i, len(at) - 1)] + 1
            if self._before + i >= self.max_skipped_steps:
                self._stopping = True
                trainer.save_checkpoint(self.ckpt_path)
                raise NonFiniteLossError(
                    f"non-finite gradients at step {number} after skipping {counted(len(self.skipped), 'step')} "
                    f"({self.skipped}): each update was skipped on the device, so the weights saved to "
                    f"{self.ckpt_path} (after step {trainer.global_step}) never took one. Fix: lower optimizer.lr or "
                    "keep trainer.gradient_clip_val set, check the data near these steps, then resume with "
                    "ckpt_path=last in the same run dir; or raise reliability.max_skipped_steps.")
            self.skipped.append(number)
            log.warning("non-finite gradients at step %d: update skipped on the device (%d of at most %d)",
                        number, len(self.skipped), self.max_skipped_steps)
        self._seen = count

    def _decide(self, trainer: L.Trainer, flag: int, first: int, mine: bool) -> None:
        if flag == 0:
            return
        kind = _KINDS[flag]
        if trainer.world_size > 1:
            kind += f" on rank {trainer.global_rank}" if mine else " on another rank"
        if first <= trainer.global_step:  # its update already ran: nothing of now may be saved
            self._stop_poisoned(trainer, first, kind)
        if self._policy is OnNonFinite.stop or len(self.skipped) >= self.max_skipped_steps:
            self._stop(trainer, first, kind)
        raise _SkipStep(kind, first)

    def _stop(self, trainer: L.Trainer, step: int, kind: str) -> None:
        self._saving = True
        try:
            trainer.save_checkpoint(self.ckpt_path)
        finally:
            self._saving = False
        skipped = f" after skipping {counted(len(self.skipped), 'step')} ({self.skipped})" if self.skipped else ""
        raise NonFiniteLossError(
            f"non-finite training loss ({kind}) at step {step}{skipped}. The last good state (after step "
            f"{step - 1}, before this step's update) is saved to {self.ckpt_path}. Fix: lower optimizer.lr or "
            "keep trainer.gradient_clip_val set, check the data near this step, then resume with ckpt_path=last "
            "in the same run dir; or set reliability.on_nonfinite=skip to drop such steps."
        )

    def _stop_poisoned(self, trainer: L.Trainer, step: int, kind: str) -> None:
        newest = (f"the newest checkpoint ({self.ckpt_path.parent}, step {self._saved_at}) was written before it"
                  if self._saved_at is not None and self._saved_at < step else "no checkpoint was written before it")
        raise NonFiniteLossError(
            f"non-finite training loss ({kind}) at step {step}, read after step {trainer.global_step} "
            f"(the loss is read from the device every {self._every} steps and before each checkpoint). "
            f"Its update has run, so nothing is saved; {newest}. Fix: lower optimizer.lr or keep "
            "trainer.gradient_clip_val set, check the data near this step, then resume with ckpt_path=last in "
            "the same run dir; or set reliability.on_nonfinite=skip to drop such steps."
        )

    def _guarded_optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any,
                                optimizer_closure: Callable[[], Any] | None = None) -> None:
        assert self._original_step is not None and self._trainer is not None
        trainer = self._trainer

        def closure() -> Any:
            out = optimizer_closure() if optimizer_closure is not None else None
            self._decide(trainer, *self._read(trainer))  # a skip decision is due every step
            return out

        try:
            self._original_step(epoch, batch_idx, optimizer, closure)
        except _SkipStep as skip:
            kind, step = skip.args
            self.skipped.append(step)
            log.warning("non-finite training loss (%s) at step %d: step skipped (%d of at most %d)",
                        kind, step, len(self.skipped), self.max_skipped_steps)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._policy is OnNonFinite.skip:
            pl_module.log("reliability/skipped_steps", float(len(self.skipped)), on_step=True, on_epoch=False)

    def figures(self) -> dict[str, Any]:
        return {"reliability/skipped_steps": list(self.skipped)} if self._policy is OnNonFinite.skip else {}

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": list(self.skipped)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped = list(state_dict.get("skipped", []))
