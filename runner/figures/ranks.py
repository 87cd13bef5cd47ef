"""Figures across the ranks of a multi-process fit: ``ranks/<figure>``, each rank's own figure (one entry
per rank, gathered at the end), and whether the ranks compiled alike.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.compile_work import COMPILE_GRAPH_BREAKS, COMPILE_GRAPHS, COMPILE_RECOMPILES, COMPILE_TIME_S
from runner.figures.memory import MEMORY_PEAK_GIB
from runner.figures.perf import PERF_SAMPLES_PER_S, PERF_STEP_MS, PERF_TOKENS_PER_S
from runner.figures.registry import define

RANKS = "ranks/"
"""The namespace of the figures across ranks; report.md's per-rank table shows its list-valued ones."""

RANKS_COMPILES_AGREE = define("ranks/compiles_agree",
                              "whether every rank compiled the same graphs, recompiles and graph breaks")
RANKS_PERF_STEP_MS = define("ranks/perf/step_ms", "each rank's perf/step_ms, one entry per rank")
RANKS_PERF_SAMPLES_PER_S = define("ranks/perf/samples_per_s", "each rank's perf/samples_per_s, one entry per rank")
RANKS_PERF_TOKENS_PER_S = define("ranks/perf/tokens_per_s", "each rank's perf/tokens_per_s, one entry per rank")
RANKS_MEMORY_PEAK_GIB = define("ranks/memory/peak_gib", "each rank's memory/peak_gib, one entry per rank")
RANKS_COMPILE_TIME_S = define("ranks/compile/time_s", "each rank's compile/time_s, one entry per rank")
RANKS_COMPILE_GRAPHS = define("ranks/compile/graphs", "each rank's compile/graphs, one entry per rank")
RANKS_COMPILE_RECOMPILES = define("ranks/compile/recompiles", "each rank's compile/recompiles, one entry per rank")
RANKS_COMPILE_GRAPH_BREAKS = define("ranks/compile/graph_breaks",
                                    "each rank's compile/graph_breaks, one entry per rank")

PER_RANK: dict[str, str] = {
    PERF_STEP_MS: RANKS_PERF_STEP_MS,
    PERF_SAMPLES_PER_S: RANKS_PERF_SAMPLES_PER_S,
    PERF_TOKENS_PER_S: RANKS_PERF_TOKENS_PER_S,
    MEMORY_PEAK_GIB: RANKS_MEMORY_PEAK_GIB,
    COMPILE_TIME_S: RANKS_COMPILE_TIME_S,
    COMPILE_GRAPHS: RANKS_COMPILE_GRAPHS,
    COMPILE_RECOMPILES: RANKS_COMPILE_RECOMPILES,
    COMPILE_GRAPH_BREAKS: RANKS_COMPILE_GRAPH_BREAKS,
}
"""A figure gathered from every rank -> the key of its per-rank list."""
