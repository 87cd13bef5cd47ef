"""Figures across the ranks of a multi-process fit: each rank's own headline figures gathered at the
end (``ranks/<figure>``), and the throughput summed over ranks (each rank's own measured rate, not one
rank's times the world size). Every rank calls these at the same point: the collectives match.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch

from runner.figures.compile_work import COMPILE_GRAPH_BREAKS, COMPILE_GRAPHS, COMPILE_RECOMPILES, COMPILE_TIME_S
from runner.figures.memory import MEMORY_PEAK_GIB
from runner.figures.perf import PERF_SAMPLES_PER_S, PERF_STEP_MS, PERF_TOKENS_PER_S
from runner.figures.ranks import PER_RANK, RANKS_COMPILES_AGREE

RANK_FIELDS = (PERF_STEP_MS, PERF_SAMPLES_PER_S, PERF_TOKENS_PER_S, MEMORY_PEAK_GIB, COMPILE_TIME_S,
               COMPILE_GRAPHS, COMPILE_RECOMPILES, COMPILE_GRAPH_BREAKS)
"""The figures gathered from every rank at the end of a multi-process fit (``ranks/<figure>``)."""
AGREEING_FIELDS = frozenset({COMPILE_GRAPHS, COMPILE_RECOMPILES, COMPILE_GRAPH_BREAKS})
"""The figures every rank must share: ranks that compile differently deadlock or diverge."""

Rates = tuple[float | None, float | None]
"""(samples/s, tokens/s); None where no rank measured that rate."""


def gather_rank_figures(strategy: pl.strategies.Strategy, own: dict[str, Any],
                        device: torch.device) -> tuple[dict[str, Any], Rates]:
    """One all-gather of this rank's ``RANK_FIELDS``: ``ranks/<figure>`` lists (one entry per rank),
    ``ranks/compiles_agree`` (the same graphs, recompiles and graph breaks on every rank), and the
    (samples/s, tokens/s) summed over ranks."""
    local = torch.tensor([float(own.get(k) or 0.0) for k in RANK_FIELDS], dtype=torch.float64, device=device)
    rows = strategy.all_gather(local).reshape(-1, len(RANK_FIELDS)).cpu().tolist()
    per_rank: dict[str, Any] = {PER_RANK[key]: [row[i] for row in rows] for i, key in enumerate(RANK_FIELDS)}
    total = {key: sum(per_rank[PER_RANK[key]]) for key in (PERF_SAMPLES_PER_S, PERF_TOKENS_PER_S)}
    compiles = [tuple(row[i] for i, k in enumerate(RANK_FIELDS) if k in AGREEING_FIELDS) for row in rows]
    per_rank[RANKS_COMPILES_AGREE] = len(set(compiles)) == 1
    return per_rank, (total[PERF_SAMPLES_PER_S] or None, total[PERF_TOKENS_PER_S] or None)


def sum_rates(strategy: pl.strategies.Strategy, own: Rates, device: torch.device) -> Rates:
    """(samples/s, tokens/s) summed over ranks by one all-reduce; a rate no rank measured stays None."""
    rates = torch.tensor([r or 0.0 for r in own], dtype=torch.float64, device=device)
    total = strategy.reduce(rates, reduce_op="sum").tolist()
    return total[0] or None, total[1] or None
