"""Figures across the ranks of a multi-process fit: each rank's headline figures gathered at the end
(``ranks/<figure>``) and the throughput summed over ranks. Every rank calls these at the same point."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch

from runner.figures.compile_work import COMPILE_GRAPH_BREAKS, COMPILE_GRAPHS, COMPILE_RECOMPILES, COMPILE_TIME_S
from runner.figures.memory import MEMORY_PEAK_GIB
from runner.figures.perf import (
    PERF_EXAMPLES_PER_S,
    PERF_LOSS_TOKENS_PER_S,
    PERF_SAMPLES_PER_S,
    PERF_STEP_MS,
    PERF_TOKENS_PER_S,
)
from runner.figures.ranks import PER_RANK, RANKS_COMPILES_AGREE

RANK_FIELDS = (PERF_STEP_MS, PERF_SAMPLES_PER_S, PERF_TOKENS_PER_S, MEMORY_PEAK_GIB, COMPILE_TIME_S,
               COMPILE_GRAPHS, COMPILE_RECOMPILES, COMPILE_GRAPH_BREAKS)
"""The figures gathered from every rank at the end of a multi-process fit (``ranks/<figure>``)."""
AGREEING_FIELDS = frozenset({COMPILE_GRAPHS, COMPILE_RECOMPILES, COMPILE_GRAPH_BREAKS})
"""The figures every rank must share: ranks that compile differently deadlock or diverge."""

RATES = (PERF_SAMPLES_PER_S, PERF_TOKENS_PER_S, PERF_EXAMPLES_PER_S, PERF_LOSS_TOKENS_PER_S)
"""The throughput figures, each summed over ranks."""
Rates = dict[str, float | None]
"""Each of ``RATES``; None where no rank measured that rate."""


def gather_rank_figures(strategy: pl.strategies.Strategy, own: dict[str, Any],
                        device: torch.device) -> tuple[dict[str, Any], Rates]:
    """One all-gather: ``ranks/<figure>`` lists, ``ranks/compiles_agree`` and the rates summed over ranks."""
    fields = (*RANK_FIELDS, *(k for k in RATES if k not in RANK_FIELDS))
    local = torch.tensor([float(own.get(k) or 0.0) for k in fields], dtype=torch.float64, device=device)
    rows = strategy.all_gather(local).reshape(-1, len(fields)).cpu().tolist()
    per_rank: dict[str, Any] = {PER_RANK[key]: [row[i] for row in rows] for i, key in enumerate(RANK_FIELDS)}
    total = {key: sum(row[fields.index(key)] for row in rows) or None for key in RATES}
    compiles = [tuple(row[i] for i, k in enumerate(RANK_FIELDS) if k in AGREEING_FIELDS) for row in rows]
    per_rank[RANKS_COMPILES_AGREE] = len(set(compiles)) == 1
    return per_rank, total


def sum_rates(strategy: pl.strategies.Strategy, own: Rates, device: torch.device) -> Rates:
    """Each rate summed over ranks by one all-reduce; a rate no rank measured stays None."""
    rates = torch.tensor([own.get(k) or 0.0 for k in RATES], dtype=torch.float64, device=device)
    total = strategy.reduce(rates, reduce_op="sum").tolist()
    return {k: v or None for k, v in zip(RATES, total, strict=True)}
