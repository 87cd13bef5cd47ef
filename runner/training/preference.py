"""``PreferenceModule``: trains a causal LM on preference pairs with DPO, SimPO or ORPO (``objective=...``,
docs/preference.md)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from runner.config.schema.objective import Loss, ObjectiveConfig
from runner.data.preference.batch import PairInputs
from runner.data.traits import ValMetric
from runner.metrics import TRAIN_METRICS, VAL_METRICS
from runner.training import preference_losses as losses
from runner.training.logprobs import pair_logps
from runner.training.loss import FULL_LOGITS, LossPlan
from runner.training.module import OptimizerFactory, SchedulerFactory, TrainModule
from runner.training.reference import Precomputed, Reference

Batch = tuple[PairInputs, torch.Tensor]
STATS = ("chosen", "rejected", "accuracies", "margins", "logps_chosen", "logps_rejected")
CHECKPOINT_KEY = "runner_reference_digest"


class PreferenceModule(TrainModule):
    """A causal LM, a preference objective and its reference (module docstring). ``batch`` is ``(PairInputs,
    targets)`` (:mod:`runner.data.preference.batch`)."""

    def __init__(self, model: nn.Module, optimizer: OptimizerFactory, objective: ObjectiveConfig,
                 reference: Reference, scheduler: SchedulerFactory | None = None,
                 weight_decay_min_dim: int = 2, loss: LossPlan = FULL_LOGITS) -> None:
        super().__init__(model, optimizer, scheduler, weight_decay_min_dim, val_metric=ValMetric.none, loss=loss)
        self.loss_kind = objective.loss
        self.beta, self.label_smoothing, self.gamma = objective.beta, objective.label_smoothing, objective.gamma
        self.reference = reference
        reference.bind(loss, self.model)  # the reference's log-probabilities through the same loss as the policy's

    def pair_losses(self, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The batch's loss and TRL's figures (means over its pairs)."""
        return losses.reduce(self.pair_outputs(batch), batch[0].pairs)

    def pair_outputs(self, batch: Batch) -> losses.PairLosses:
        """Each pair's loss, rewards and log-probabilities (what ``runner eval`` sums over a whole split)."""
        inputs, targets = batch
        self.reference.policy()
        sums, counts = pair_logps(self.loss_fn, self.model, inputs, targets)
        policy = losses.PairLogps.of(sums, counts)
        if self.loss_kind is Loss.dpo:
            reference = self.reference.logps(self.model, inputs, targets)
            assert reference is not None, "DPO has a reference"
            out = losses.dpo(policy, reference, self.beta, self.label_smoothing)
        elif self.loss_kind is Loss.simpo:
            out = losses.simpo(policy, self.beta, self.gamma, self.label_smoothing)
        else:
            out = losses.orpo(policy, self.beta, inputs.pairs)
        return out

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:  # type: ignore[override]
        loss, stats = self.pair_losses(batch)
        n = batch[0].pair_slots  # a shape, not a value: no host sync
        self.log("train/loss", loss, batch_size=n)
        for key, name in zip(TRAIN_METRICS, STATS, strict=True):
            self.log(key, stats[name], batch_size=n)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:  # type: ignore[override]
        loss, stats = self.pair_losses(batch)
        # Weighed by the pairs the batch holds (packed rows hold more short pairs than long ones): validation's
        # figures are means over its pairs. A host sync, in validation only (it runs eagerly).
        n = int(batch[0].pairs.sum())
        self.log("val/loss", loss, prog_bar=True, sync_dist=True, batch_size=n)
        for key, name in zip(VAL_METRICS, STATS, strict=True):
            self.log(key, stats[name], sync_dist=True, batch_size=n)
        return loss

    def setup(self, stage: str) -> None:
        """Before the fit moves or compiles anything (and before a resume restores the trained weights): precomputed
        reference log-probabilities read from their cache, or computed once by the first process and cached."""
        if not isinstance(self.reference, Precomputed) or stage != "fit":
            return
        trainer = self.trainer
        datamodule = trainer.datamodule  # type: ignore[attr-defined]
        datamodule.setup(stage)
        self.reference.prepare(self.model, datamodule, trainer.strategy.root_device,
                               writes=trainer.is_global_zero, context=trainer.precision_plugin.forward_context,
                               wait=trainer.strategy.barrier)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.reference.digest is not None:
            checkpoint[CHECKPOINT_KEY] = self.reference.digest

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get(CHECKPOINT_KEY)
        if saved is not None and self.reference.digest is not None and saved != self.reference.digest:
            raise RuntimeError("the reference this run trained against is not the one its config builds now: the "
                               "checkpoint records the digest of the reference's weights, and the model built again "
                               "(model.path, its files, or the seed a model built from its configuration starts "
                               "from) gives others. Resume with the run's own config and model files.")

    def figures(self) -> dict[str, Any]:
        """``objective/*``: the loss, its own settings (those the step used: beta; SimPO's gamma; DPO's and SimPO's
        label smoothing) and where the reference came from."""
        own: dict[str, Any] = {"objective/loss": self.loss_kind.value, "objective/beta": self.beta}
        if self.loss_kind is Loss.simpo:
            own["objective/gamma"] = self.gamma
        if self.loss_kind in (Loss.dpo, Loss.simpo):
            own["objective/label_smoothing"] = self.label_smoothing
        return {**own, **self.reference.figures()}
