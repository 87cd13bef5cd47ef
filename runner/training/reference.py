"""Where DPO's reference log-probabilities come from (``objective.reference``), each a small module of the preference
step (:class:`runner.training.preference.PreferenceModule`) with no state of its own in a checkpoint."""

from __future__ import annotations

import copy
import hashlib
import io
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from runner.data.preference.batch import PairInputs
from runner.peft.layer import AdapterGate, LoRALinear
from runner.training.logprobs import pair_logps
from runner.training.loss import FullLogits, Loss, LossPlan

log = logging.getLogger(__name__)

Forward = Callable[[Any], torch.Tensor]


def reference_sums(model: Forward, inputs: PairInputs, targets: torch.Tensor,
                   loss: Loss | None = None) -> torch.Tensor:
    """``[2P]``: ``model``'s log-probability of each sequence of the batch, without gradients, through ``loss``
    (the run's: whole or chunked logits; None: the whole logits)."""
    with torch.no_grad():
        sums, _ = pair_logps(loss or FullLogits(), model, inputs, targets)
    return sums.detach()


def gate_adapter(model: nn.Module) -> AdapterGate:
    """Put one :class:`AdapterGate` into every adapted layer of ``model`` (the same one in each); returns it."""
    gate = AdapterGate()
    for module in model.modules():
        if isinstance(module, LoRALinear):
            module.gate = gate
    return gate


def weights_digest(model: nn.Module, skip: Callable[[str], bool] = lambda name: False) -> str:
    """A hash of every parameter and buffer of ``model`` (names, dtypes, shapes, values) whose name ``skip`` does not
    reject: what tells one set of weights from another."""
    h = hashlib.blake2b(digest_size=16)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    for name in sorted(state):
        if skip(name):
            continue
        t = state[name].detach()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.cpu().contiguous().flatten().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Reference(nn.Module):
    """Where the reference log-probabilities come from; this base: none (SimPO, ORPO)."""

    describe = "none (the objective uses none)"
    digest: str | None = None
    loss: Loss | None = None

    def bind(self, plan: LossPlan, model: nn.Module) -> None:
        """Compute through the run's loss (``plan``: whole or chunked logits) over ``model``, the policy: the
        reference's forward holds no more logits than the policy's."""
        self.loss = plan.loss_for(model)

    def policy(self) -> None:
        """Before the policy's forward: nothing."""

    def logps(self, model: Forward, inputs: PairInputs, targets: torch.Tensor) -> torch.Tensor | None:
        return None

    def figures(self) -> dict[str, Any]:
        return {}


class AdapterReference(Reference):
    """The adapter's frozen base, through the gate (module docstring)."""

    describe = "the adapter's frozen base, in the same compiled step (a tensor gate, no flag)"
    on: torch.Tensor
    off: torch.Tensor

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.gate = gate_adapter(model)
        # Non-persistent buffers: they move and cast with the module, and no checkpoint holds them.
        self.register_buffer("on", torch.ones(()), persistent=False)
        self.register_buffer("off", torch.zeros(()), persistent=False)

    def policy(self) -> None:
        self.gate.value = self.on

    def logps(self, model: Forward, inputs: PairInputs, targets: torch.Tensor) -> torch.Tensor | None:
        self.gate.value = self.off
        sums = reference_sums(model, inputs, targets, self.loss)
        self.gate.value = None  # the adapted model again, for whoever calls it next (validation, generation)
        return sums

    def figures(self) -> dict[str, Any]:
        return {"objective/reference": self.describe}


class FrozenCopy(Reference):
    """A frozen copy of the model as built (module docstring)."""

    describe = "a frozen copy of the model"
    frozen: nn.Module

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        frozen = copy.deepcopy(model).requires_grad_(False)
        object.__setattr__(self, "frozen", frozen)  # not a submodule: outside the state dict and the optimizer
        self.digest = weights_digest(frozen)

    def _apply(self, fn: Any, recurse: bool = True) -> FrozenCopy:
        super()._apply(fn, recurse)
        self.frozen._apply(fn, recurse)  # moved and cast with the module it belongs to
        return self

    def train(self, mode: bool = True) -> FrozenCopy:
        super().train(mode)
        self.frozen.train(mode)
        return self

    def bind(self, plan: LossPlan, model: nn.Module) -> None:
        self.loss = plan.loss_for(self.frozen)  # the copy's own output layer, at the policy's path

    def logps(self, model: Forward, inputs: PairInputs, targets: torch.Tensor) -> torch.Tensor | None:
        return reference_sums(self.frozen, inputs, targets, self.loss)

    def figures(self) -> dict[str, Any]:
        size = sum(t.numel() * t.element_size() for t in (*self.frozen.parameters(), *self.frozen.buffers()))
        return {"objective/reference": self.describe, "objective/reference_bytes": size}


class Precomputed(Reference):
    """Reference log-probabilities computed once before training and cached (module docstring). ``model``: the model as
    built."""

    describe = "precomputed"
    digest: str

    def __init__(self, model: nn.Module, precision: str, cache_dir: str | None, base_only: bool) -> None:
        super().__init__()
        self.gate = gate_adapter(model) if base_only else None
        adapter = (lambda name: ".lora_" in name or name.startswith("lora_")) if base_only else (lambda name: False)
        self.digest = weights_digest(model, adapter)
        self.precision, self.cache_dir = precision, cache_dir
        self.outcome: dict[str, str] = {}

    def logps(self, model: Forward, inputs: PairInputs, targets: torch.Tensor) -> torch.Tensor | None:
        return inputs.reference

    def path(self, data_key: list[Any], which: str) -> Path:
        """One split's cached reference log-probabilities, named by the reference's weights (``digest``), what the
        data module says the pairs depend on (rows, shape, templates, tokenizer, EOS, ``seq_len``, the split), the
        precision they were computed in, and which split."""
        from runner.data import store
        from runner.data.reading.tables import fingerprint

        root = Path(self.cache_dir).expanduser() if self.cache_dir else store.root()
        if self.cache_dir:
            root.mkdir(parents=True, exist_ok=True)
        return root / f"reference-{fingerprint(self.digest, data_key, self.precision, which, 1)}.npy"

    def prepare(self, model: nn.Module, datamodule: Any, device: torch.device, writes: bool = True,
                context: Callable[[], AbstractContextManager[Any]] = nullcontext,
                wait: Callable[[], None] = lambda: None) -> None:
        """Give each of ``datamodule``'s datasets its reference log-probabilities: read from the cache, else (where
        ``writes``: one process of a run) computed with ``model`` on ``device`` in ``context`` and written there.
        ``wait``: until the writing process is done (a barrier across ranks)."""
        from runner.atomic_files import atomic_write_bytes

        data_key = datamodule.reference_key()
        missing = [(which, path) for which in datamodule.datasets if not (path := self.path(data_key, which)).exists()]
        if missing and writes:
            was_training = model.training
            model.to(device).eval()  # the reference without dropout: the same values in every pass
            try:
                for which, path in missing:
                    values = self._compute(model, datamodule, which, device, context)
                    buffer = io.BytesIO()
                    np.save(buffer, values)
                    atomic_write_bytes(buffer.getvalue(), path, one_writer=False)
                    self.outcome[which] = f"computed: {path}"
                    log.info("reference log-probabilities of the %s pairs computed once and cached: %s", which, path)
            finally:
                model.train(was_training)
        wait()
        for which, dataset in datamodule.datasets.items():
            path = self.path(data_key, which)
            values = np.load(path)
            if values.shape != (len(dataset.fitted), 2):
                raise RuntimeError(f"{path} holds {values.shape[0]} pairs' reference log-probabilities, not the "
                                   f"{len(dataset.fitted)} of the {which} split: delete it and run again.")
            dataset.reference = values
            if which not in self.outcome:
                self.outcome[which] = f"read: {path}"
                log.info("reference log-probabilities of the %s pairs read from the cache (%s): no reference "
                         "forward", which, path)

    def _compute(self, model: nn.Module, datamodule: Any, which: str, device: torch.device,
                 context: Callable[[], AbstractContextManager[Any]]) -> np.ndarray:
        from lightning.fabric.utilities import move_data_to_device

        values = np.full((len(datamodule.datasets[which].fitted), 2), np.nan, dtype=np.float32)
        if self.gate is not None:
            self.gate.value = torch.zeros((), device=device)
        try:
            for batch in datamodule.loader(which):
                inputs, targets = move_data_to_device(batch, device)
                with context():
                    sums = reference_sums(model, inputs, targets, self.loss).float().cpu().numpy()
                index = inputs.index.cpu().numpy()
                there = index >= 0
                p = inputs.pair_slots
                values[index[there], 0] = sums[:p][there]
                values[index[there], 1] = sums[p:][there]
        finally:
            if self.gate is not None:
                self.gate.value = None
        if np.isnan(values).any():
            raise RuntimeError(f"the reference pass left {int(np.isnan(values).any(axis=1).sum())} {which} pairs "
                               "without log-probabilities")
        return values

    def figures(self) -> dict[str, Any]:
        cache = "; ".join(f"{which} {outcome}" for which, outcome in self.outcome.items())
        return {"objective/reference": "precomputed once, cached (objective.reference=precompute)",
                **({"objective/reference_cache": cache} if cache else {})}


