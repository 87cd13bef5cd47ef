"""The preference losses and their gradients equal TRL's on the same batch and weights, for padded and packed pairs,
under a LoRA adapter (the reference its frozen base) and in a full fine-tune (a frozen copy); and the reference
through the adapter's gate is the frozen base exactly.

TRL's side is written out here from TRL's code (trl 1.13.0, the version ``benchmarks/dpo.py`` races), on TRL's
batch layout (``DataCollatorForPreference``: prompt + chosen rows, then prompt + rejected rows, right-padded, a
completion mask), computed with ``log_softmax`` and a gather (TRL's ``selective_log_softmax``):

- DPO, ``trl/trainer/dpo_trainer.py``, ``DPOTrainer._compute_loss``: ``logps = per_token_logps.sum(1)`` over the
  completion mask, ``chosen_logratios = chosen_logps - ref_chosen_logps`` (and rejected), ``per_sequence_loss =
  -F.logsigmoid(beta * (chosen_logratios - rejected_logratios))`` for ``loss_type="sigmoid"``, ``loss =
  per_sequence_loss.mean()``; ``chosen_rewards = beta * chosen_logratios``, ``rewards/accuracies = (chosen_rewards >
  rejected_rewards).float()``. Label smoothing is TRL's earlier ``DPOTrainer.dpo_loss`` (conservative DPO):
  ``-F.logsigmoid(beta * logits) * (1 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing``.
- SimPO, ``trl/experimental/cpo/cpo_trainer.py``, ``CPOTrainer.cpo_loss`` with ``loss_type="simpo"`` (and
  ``cpo_alpha=0``): log-probabilities averaged per completion token (``average_log_prob=True``), ``logits =
  chosen - rejected - simpo_gamma / beta``, the smoothed sigmoid loss above; rewards ``beta * logps``.
- ORPO, ``trl/experimental/orpo/orpo_trainer.py``, ``ORPOTrainer.odds_ratio_loss``: ``log_odds = (chosen -
  rejected) - (log1mexp(chosen) - log1mexp(rejected))`` on averaged log-probabilities, ``loss = nll -
  mean(beta * logsigmoid(log_odds))``; the NLL is the chosen completions' cross-entropy per token (the ORPO paper's
  SFT term; TRL's experimental trainer also counts the prompt's tokens there).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from runner.config.schema.loss import LossConfig
from runner.config.schema.objective import Loss, ObjectiveConfig
from runner.config.schema.peft import PeftConfig, PeftMethod
from runner.data.preference.batch import PackCollate, PairCollate, PairPacks, PairSequences
from runner.data.preference.encode import FittedPairs
from runner.data.sequences.padding import IGNORE_INDEX, PadTo
from runner.data.sequences.windows import Spans
from runner.losses import chunking_unavailable
from runner.models.hf import CausalLM
from runner.peft import apply_peft
from runner.training.logprobs import sequence_logps, token_logps
from runner.training.loss import FULL_LOGITS, resolve_loss
from runner.training.preference import PreferenceModule
from runner.training.reference import AdapterReference, FrozenCopy, Reference
from tests.tolerance import drift

needs_chunking = pytest.mark.skipif(chunking_unavailable() is not None, reason=str(chunking_unavailable()))
SEQ = 24
"""The longest sequence of a pair (``data.seq_len``): packed rows are twice this."""


class _Ids:
    """A flat sequence of ids, as a store's ``StoredIds`` gives them."""

    def __init__(self, ids: list[np.ndarray]) -> None:
        self.flat = np.concatenate(ids).astype(np.int64)
        ends = np.cumsum([len(i) for i in ids])
        self.spans = Spans(ends - np.asarray([len(i) for i in ids]), ends)

    def __getitem__(self, index: slice) -> np.ndarray:
        return self.flat[index]


def pairs(n: int = 6, seed: int = 0) -> FittedPairs:
    """``n`` pairs of random ids: prompts of 3-8 ids, completions of 1-8 (chosen and rejected of other lengths)."""
    rng = np.random.default_rng(seed)
    prompt = [rng.integers(1, 256, rng.integers(3, 9)) for _ in range(n)]
    chosen = [rng.integers(1, 256, rng.integers(1, 9)) for _ in range(n)]
    rejected = [rng.integers(1, 256, rng.integers(1, 9)) for _ in range(n)]
    p, c, r = _Ids(prompt), _Ids(chosen), _Ids(rejected)
    return FittedPairs(p, (c, r), p.spans, (c.spans, r.spans), np.arange(n), cut=0, left_out={},  # type: ignore[arg-type]
                       prompt_tokens=0, completion_tokens=0, whole=n)


def llama() -> nn.Module:
    torch.manual_seed(0)
    return CausalLM("llama", overrides=dict(vocab_size=256, hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=2, num_attention_heads=2,
                                            max_position_embeddings=2 * SEQ))


HEAD_TOO = ["q_proj", "k_proj", "v_proj", "o_proj", "lm_head"]
"""An adapter on the output layer too: the chunked loss takes it in (``runner.training.loss.head_operands``)."""


def lora(model: nn.Module, targets: list[str] | None = None) -> nn.Module:
    """``model`` with a rank-4 adapter whose B is not zero (so the policy differs from its base)."""
    apply_peft(model, PeftConfig(method=PeftMethod.lora, r=4, alpha=8, target_modules=targets or []))
    torch.manual_seed(1)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            nn.init.normal_(p, std=0.1)
    return model


def padded_batch(fitted: FittedPairs) -> Any:
    items = [PairSequences(fitted)[i] for i in range(len(fitted))]
    return PairCollate(PadTo(), 0, len(fitted))(items)


def packed_batch(fitted: FittedPairs) -> Any:
    packs = PairPacks(fitted, SEQ, 0)
    return PackCollate(len(packs), packs.per_row, packs.length, 0)([packs[r] for r in range(len(packs))])


# -- TRL's side, written out ------------------------------------------------------------------------------------
def trl_logps(model: Callable[[torch.Tensor], torch.Tensor], fitted: FittedPairs, order: list[int]) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """TRL's batch of the pairs in ``order`` and its per-sequence log-probabilities: chosen and rejected sums, and
    their completion token counts (``DataCollatorForPreference`` and ``_compute_loss``)."""
    rows, masks = [], []
    for side in (0, 1):
        for i in order:
            ids, start = fitted.sequence(i, side)
            rows.append(torch.as_tensor(ids))
            masks.append(torch.as_tensor([0] * start + [1] * (len(ids) - start)))
    t = max(len(r) for r in rows)
    input_ids = torch.zeros(len(rows), t, dtype=torch.long)
    completion_mask = torch.zeros(len(rows), t, dtype=torch.long)
    for j, (r, m) in enumerate(zip(rows, masks, strict=True)):
        input_ids[j, :len(r)], completion_mask[j, :len(m)] = r, m
    logits = model(input_ids)
    shift_logits, shift_labels, shift_mask = logits[:, :-1], input_ids[:, 1:], completion_mask[:, 1:]
    per_token = torch.gather(shift_logits.float().log_softmax(-1), 2, shift_labels.unsqueeze(-1)).squeeze(-1)
    per_token = per_token.masked_fill(shift_mask == 0, 0.0)
    logps, counts = per_token.sum(1), shift_mask.sum(1).float()
    c, r = logps.chunk(2)
    nc, nr = counts.chunk(2)
    return c, r, nc, nr


def trl_loss(loss: Loss, policy: tuple[torch.Tensor, ...], reference: tuple[torch.Tensor, ...] | None,
             beta: float, label_smoothing: float = 0.0, gamma: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's loss and ``rewards/accuracies`` (module docstring)."""
    c, r, nc, nr = policy
    if loss is Loss.dpo:
        assert reference is not None
        chosen_rewards, rejected_rewards = beta * (c - reference[0]), beta * (r - reference[1])
        logits = (c - reference[0]) - (r - reference[1])
        losses = -F.logsigmoid(beta * logits) * (1 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing
        out = losses.mean()
    elif loss is Loss.simpo:
        ac, ar = c / nc, r / nr
        logits = ac - ar - gamma / beta
        losses = -F.logsigmoid(beta * logits) * (1 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing
        out, chosen_rewards, rejected_rewards = losses.mean(), beta * ac, beta * ar
    else:
        ac, ar = c / nc, r / nr

        def log1mexp(x: torch.Tensor) -> torch.Tensor:
            return torch.where(x < -0.6931471805599453, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))

        log_odds = (ac - ar) - (log1mexp(ac) - log1mexp(ar))
        nll = -c.sum() / nc.sum()
        out, chosen_rewards, rejected_rewards = nll - (beta * F.logsigmoid(log_odds)).mean(), beta * ac, beta * ar
    return out, (chosen_rewards > rejected_rewards).float().mean()


# -- the comparisons --------------------------------------------------------------------------------------------
def _module(loss: Loss, adapted: bool, beta: float, label_smoothing: float, chunks: int | None = None,
            targets: list[str] | None = None) -> tuple[PreferenceModule, nn.Module]:
    """runner's module, and TRL's reference model (the frozen base, or a copy of the model as built); ``chunks``:
    the log-probabilities through the chunked loss (``loss.chunked=true loss.chunks=N``), decided as the builder
    decides it, before the adapter."""
    model = llama()
    base = copy.deepcopy(model).requires_grad_(False)
    plan = FULL_LOGITS
    if chunks is not None:
        peft = PeftConfig(method=PeftMethod.lora if adapted else PeftMethod.none, target_modules=targets or [])
        plan = resolve_loss(model, LossConfig(chunked=True, chunks=chunks), peft, {"batch_size": 6, "seq_len": SEQ},
                            None)
        assert plan.decision.chunked and plan.head == "model.lm_head", plan
    reference: Reference
    if adapted:
        lora(model, targets)
        reference = AdapterReference(model) if loss is Loss.dpo else Reference()
    else:
        reference = FrozenCopy(model) if loss is Loss.dpo else Reference()
    objective = ObjectiveConfig(loss=loss, beta=beta, label_smoothing=label_smoothing, gamma=0.5)
    return PreferenceModule(model, torch.optim.AdamW, objective, reference, loss=plan), base


def _grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


CASES = [(Loss.dpo, True, 0.0), (Loss.dpo, False, 0.0), (Loss.dpo, True, 0.1), (Loss.simpo, True, 0.0),
         (Loss.simpo, False, 0.2), (Loss.orpo, True, 0.0), (Loss.orpo, False, 0.0)]


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize(("loss", "adapted", "label_smoothing"), CASES,
                         ids=[f"{c[0].value}-{'lora' if c[1] else 'full'}-ls{c[2]}" for c in CASES])
def test_the_loss_and_its_gradients_are_trls(loss: Loss, adapted: bool, label_smoothing: float,
                                              packed: bool) -> None:
    _compare_with_trl(loss, adapted, label_smoothing, packed)


CHUNKED = [(Loss.dpo, True, None), (Loss.dpo, True, HEAD_TOO), (Loss.dpo, False, None), (Loss.simpo, True, None),
           (Loss.orpo, False, None)]


@needs_chunking
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize(("loss", "adapted", "targets"), CHUNKED,
                         ids=["dpo-lora", "dpo-lora-head", "dpo-full", "simpo-lora", "orpo-full"])
def test_chunked_the_loss_and_its_gradients_are_trls(loss: Loss, adapted: bool, targets: list[str] | None,
                                                      packed: bool) -> None:
    """``loss.chunked=true``: the policy's and the reference's log-probabilities from the hidden states and the
    output layer's weight, several chunks a batch (no ``[tokens, vocab]`` logits), still TRL's loss and gradients;
    with the adapter on the output layer too, the reference through the gate is the frozen base's."""
    _compare_with_trl(loss, adapted, 0.0, packed, chunks=4, targets=targets)


def _compare_with_trl(loss: Loss, adapted: bool, label_smoothing: float, packed: bool, chunks: int | None = None,
                      targets: list[str] | None = None) -> None:
    beta = 2.0 if loss is Loss.simpo else 0.1
    fitted = pairs()
    module, base = _module(loss, adapted, beta, label_smoothing, chunks, targets)
    assert module.loss_fn.chunked is (chunks is not None)
    batch = packed_batch(fitted) if packed else padded_batch(fitted)
    ours, stats = module.pair_losses(batch)
    ours.backward()
    inputs = batch[0]
    order = [int(i) for i in inputs.index[inputs.pairs > 0]]
    assert sorted(order) == list(range(len(fitted)))  # every pair in the batch, once

    trl_model = copy.deepcopy(module.model)  # the same weights; its gates (if any) open, as after every step
    trl_model.zero_grad(set_to_none=True)
    policy = trl_logps(trl_model, fitted, order)
    reference = None
    if loss is Loss.dpo:
        with torch.no_grad():
            reference = trl_logps(base, fitted, order)[:2]
    theirs, accuracy = trl_loss(loss, policy, reference, beta, label_smoothing, gamma=0.5)
    theirs.backward()

    # Another order of the same float32 operations (a sum per sequence, a gather against a cross-entropy).
    tol = drift(steps=1, depth=64, magnitude=max(1.0, float(theirs.detach().abs())))
    torch.testing.assert_close(ours, theirs, **tol.kwargs)
    assert float(stats["accuracies"]) == pytest.approx(float(accuracy), abs=1e-6)
    ours_g, theirs_g = _grads(module.model), _grads(trl_model)
    assert ours_g.keys() == theirs_g.keys() and ours_g
    if adapted:
        assert all("lora_" in n for n in ours_g)  # the adapter trains, the base does not
    for name, g in ours_g.items():
        scale = float(theirs_g[name].abs().max())
        torch.testing.assert_close(g, theirs_g[name], **drift(steps=1, depth=256, magnitude=max(scale, 1e-3)).kwargs)


def test_the_reference_through_the_gate_is_the_frozen_base_exactly() -> None:
    """``base + 0 * delta`` is the base's output: the same kernels on the same inputs, so equal to the bit."""
    fitted = pairs()
    model = llama()
    base = copy.deepcopy(model)
    lora(model)
    reference = AdapterReference(model)
    inputs, targets = padded_batch(fitted)
    ours = reference.logps(model, inputs, targets)
    with torch.no_grad():
        theirs, _ = sequence_logps(base(inputs.ids), targets, inputs.slots, 2 * inputs.pair_slots)
        policy, _ = sequence_logps(model(inputs.ids), targets, inputs.slots, 2 * inputs.pair_slots)
    assert ours is not None and torch.equal(ours, theirs)  # the same ops on the same weights: exact
    assert float((policy - theirs).abs().max()) > 1e-3  # the adapter is not a no-op: the gate did it
    assert reference.gate.value is None  # the adapted model again afterwards


def test_per_token_log_probabilities_are_log_softmax_and_gather() -> None:
    torch.manual_seed(0)
    logits, targets = torch.randn(3, 7, 50), torch.randint(0, 50, (3, 7))
    targets[0, :2] = IGNORE_INDEX
    expected = torch.gather(logits.log_softmax(-1), 2, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    expected = expected.masked_fill(targets == IGNORE_INDEX, 0.0)
    torch.testing.assert_close(token_logps(logits, targets), expected, **drift(steps=1, depth=16).kwargs)


def test_compiled_the_step_s_reference_is_the_frozen_base_s_and_one_graph() -> None:
    """The policy and the reference through Dynamo and AOTAutograd (``aot_eager``): one graph for both forwards, the
    reference's log-probabilities the frozen base's (another order of the same float32 operations: a tolerance)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    fitted = pairs()
    model = llama()
    base = copy.deepcopy(model)
    lora(model)
    reference = AdapterReference(model)
    inputs, targets = padded_batch(fitted)

    def step(inputs: Any, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        reference.policy()
        policy, _ = sequence_logps(model(inputs.ids), targets, inputs.slots, 2 * inputs.pair_slots)
        ref = reference.logps(model, inputs, targets)
        assert ref is not None
        return policy, ref

    torch._dynamo.reset()
    counters.clear()
    policy, ref = torch.compile(step, backend="aot_eager")(inputs, targets)
    with torch.no_grad():
        theirs, _ = sequence_logps(base(inputs.ids), targets, inputs.slots, 2 * inputs.pair_slots)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    torch.testing.assert_close(ref, theirs, **drift(steps=1, depth=64, magnitude=float(theirs.abs().max())).kwargs)
    assert float((policy.detach() - theirs).abs().max()) > 1e-3 and reference.gate.value is None


@needs_chunking
def test_compiled_the_chunked_step_is_one_graph_and_the_eager_step_s_loss() -> None:
    """``loss.chunked=true`` under Dynamo and AOTAutograd (``aot_eager``): the policy's and the reference's chunked
    log-probabilities (torch's custom op, an opaque node) in one graph, no break, the eager step's loss."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    module, _ = _module(Loss.dpo, True, 0.1, 0.0, chunks=4, targets=HEAD_TOO)
    batch = packed_batch(pairs())
    eager, _ = module.pair_losses(batch)
    torch._dynamo.reset()
    counters.clear()
    compiled, _ = torch.compile(module.pair_losses, backend="aot_eager")(batch)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    torch.testing.assert_close(compiled, eager, **drift(steps=1, depth=64, magnitude=float(eager.abs())).kwargs)


@pytest.mark.parametrize(("loss", "own"), [
    (Loss.dpo, {"objective/beta": 0.2, "objective/label_smoothing": 0.1}),
    (Loss.simpo, {"objective/beta": 0.2, "objective/gamma": 0.5, "objective/label_smoothing": 0.1}),
    (Loss.orpo, {"objective/beta": 0.2}),  # ORPO's weight of the odds-ratio term, its one setting
])
def test_the_summary_shows_each_objectives_own_settings(loss: Loss, own: dict[str, float]) -> None:
    from runner.telemetry.report import format_summary

    module, _ = _module(loss, adapted=False, beta=0.2, label_smoothing=0.1)
    figures = module.figures()
    settings = {k: v for k, v in figures.items() if k not in ("objective/loss", "objective/reference",
                                                               "objective/reference_bytes")}
    assert settings == own
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in format_summary(figures).splitlines()
            if line.count("│") == 3}
    assert rows.get("gamma") == ("0.5" if loss is Loss.simpo else None), rows
