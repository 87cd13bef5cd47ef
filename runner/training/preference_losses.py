"""The preference losses, as pure functions of a batch's per-pair log-probabilities (TRL's formulas: the tests write
them out beside TRL's code)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PairLogps:
    """One model's log-probabilities of a batch's pairs: summed over each completion's tokens (``[P]`` each), and
    the number of tokens."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_tokens: torch.Tensor
    rejected_tokens: torch.Tensor

    @classmethod
    def of(cls, sums: torch.Tensor, counts: torch.Tensor) -> PairLogps:
        """From ``[2P]`` per-sequence sums and counts, the chosen sequences first."""
        return cls(*sums.chunk(2), *counts.chunk(2))

    def averages(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Chosen and rejected log-probabilities per token."""
        return self.chosen / self.chosen_tokens.clamp(min=1), self.rejected / self.rejected_tokens.clamp(min=1)


@dataclass(frozen=True)
class PairLosses:
    """What an objective made of a batch: each pair's loss, a term of the whole batch (ORPO's cross-entropy; 0
    otherwise), and what TRL reports: rewards and log-probabilities per pair (all ``[P]``, detached but ``losses``)."""

    losses: torch.Tensor
    batch_term: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor
    chosen_logps: torch.Tensor
    rejected_logps: torch.Tensor


def _smoothed(z: torch.Tensor, beta: float, label_smoothing: float) -> torch.Tensor:
    return -F.logsigmoid(beta * z) * (1 - label_smoothing) - F.logsigmoid(-beta * z) * label_smoothing


def dpo(policy: PairLogps, reference: torch.Tensor, beta: float, label_smoothing: float) -> PairLosses:
    """DPO's sigmoid loss (module docstring); ``reference``: the reference's ``[2P]`` sums, the chosen first."""
    ref_c, ref_r = reference.detach().chunk(2)
    z = (policy.chosen - ref_c) - (policy.rejected - ref_r)
    zero = torch.zeros((), device=z.device)
    return PairLosses(_smoothed(z, beta, label_smoothing), zero, beta * (policy.chosen - ref_c).detach(),
                      beta * (policy.rejected - ref_r).detach(), policy.chosen.detach(), policy.rejected.detach())


def simpo(policy: PairLogps, beta: float, gamma: float, label_smoothing: float) -> PairLosses:
    """SimPO's loss (module docstring)."""
    avg_c, avg_r = policy.averages()
    z = avg_c - avg_r - gamma / beta
    zero = torch.zeros((), device=z.device)
    return PairLosses(_smoothed(z, beta, label_smoothing), zero, beta * avg_c.detach(), beta * avg_r.detach(),
                      avg_c.detach(), avg_r.detach())


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """``log(1 - exp(x))`` for ``x < 0``, without cancellation near 0 (branching at ``-ln 2``, as TRL does)."""
    return torch.where(x < -0.6931471805599453, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def orpo(policy: PairLogps, beta: float, pairs: torch.Tensor) -> PairLosses:
    """ORPO's loss (module docstring); ``pairs`` (1 where a pair is) weighs the chosen cross-entropy's tokens."""
    avg_c, avg_r = policy.averages()
    # An empty pair slot averages 0 tokens to 0, where log(1 - e^0) is -inf (and its gradient infinite): a safe
    # value there, which the mean over the pairs present leaves out anyway.
    there = pairs > 0
    avg_c, avg_r = (torch.where(there, a, torch.full_like(a, -1.0)) for a in (avg_c, avg_r))
    log_odds = (avg_c - avg_r) - (log1mexp(avg_c) - log1mexp(avg_r))
    nll = -(policy.chosen * pairs).sum() / (policy.chosen_tokens * pairs).sum().clamp(min=1)
    return PairLosses(-beta * F.logsigmoid(log_odds), nll, beta * avg_c.detach(), beta * avg_r.detach(),
                      avg_c.detach(), avg_r.detach())


def reduce(out: PairLosses, pairs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The batch's loss (the mean over the pairs there, plus the batch term) and TRL's figures as means over them:
    ``chosen``, ``rejected`` (rewards), ``accuracies``, ``margins``, ``logps_chosen``, ``logps_rejected``."""
    n = pairs.sum().clamp(min=1)

    def mean(x: torch.Tensor) -> torch.Tensor:
        return torch.where(pairs > 0, x, torch.zeros_like(x)).sum() / n

    loss = mean(out.losses) + out.batch_term
    stats = {"chosen": mean(out.chosen_rewards), "rejected": mean(out.rejected_rewards),
             "accuracies": mean((out.chosen_rewards > out.rejected_rewards).to(pairs.dtype)),
             "margins": mean(out.chosen_rewards - out.rejected_rewards),
             "logps_chosen": mean(out.chosen_logps), "logps_rejected": mean(out.rejected_logps)}
    return loss, stats
