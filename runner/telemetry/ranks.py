"""Figures across the ranks of a multi-process fit: each rank's own headline figures gathered at the
end (``ranks/<figure>``), and the throughput summed over ranks (each rank's own measured rate, not one
rank's times the world size). Every rank calls these at the same point: the collectives match.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch

RANK_FIELDS = ("perf/step_ms", "perf/samples_per_s", "perf/tokens_per_s", "memory/peak_gib", "compile/time_s",
               "compile/graphs", "compile/recompiles", "compile/graph_breaks")
"""The figures gathered from every rank at the end of a multi-process fit (``ranks/<figure>``)."""
AGREEING_FIELDS = frozenset({"compile/graphs", "compile/recompiles", "compile/graph_breaks"})
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
    per_rank: dict[str, Any] = {f"ranks/{key}": [row[i] for row in rows] for i, key in enumerate(RANK_FIELDS)}
    total = {key: sum(per_rank[f"ranks/{key}"]) for key in ("perf/samples_per_s", "perf/tokens_per_s")}
    compiles = [tuple(row[i] for i, k in enumerate(RANK_FIELDS) if k in AGREEING_FIELDS) for row in rows]
    per_rank["ranks/compiles_agree"] = len(set(compiles)) == 1
    return per_rank, (total["perf/samples_per_s"] or None, total["perf/tokens_per_s"] or None)


def sum_rates(strategy: pl.strategies.Strategy, own: Rates, device: torch.device) -> Rates:
    """(samples/s, tokens/s) summed over ranks by one all-reduce; a rate no rank measured stays None."""
    rates = torch.tensor([r or 0.0 for r in own], dtype=torch.float64, device=device)
    total = strategy.reduce(rates, reduce_op="sum").tolist()
    return total[0] or None, total[1] or None
