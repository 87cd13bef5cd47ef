"""Zoo idioms on 2 CPU processes (gloo), through DDPCompileStrategy or Lightning's DDPStrategy.

Run by ``tests/test_idioms.py`` as a script (Lightning's launcher re-executes it for rank 1)::

    python -m tests.zoo.ddp_fit runner|lightning IDIOM[,IDIOM...] OUT_DIR

The idioms are fitted one after another in the same two processes, each with a strategy of its own (the
processes start once: their start is most of a small fit's time). Each rank writes
``OUT_DIR/IDIOM/rank<N>.json``: its step and epoch counts, a checksum of its final parameters, and (runner) the
compile figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from lightning.pytorch.strategies import DDPStrategy

from runner.config.schema import CompileConfig, OptimizerPolicy
from runner.strategy import DDPCompileStrategy
from runner.telemetry.collector import CompileCollector
from tests.zoo.harness import fit
from tests.zoo.registry import IDIOMS


def main() -> None:
    which, names, out = sys.argv[1], sys.argv[2].split(","), Path(sys.argv[3])
    for name in names:
        run_one(which, name, out / name)


def run_one(which: str, name: str, out: Path) -> None:
    """Fit idiom ``name`` on both ranks; this rank writes ``out/rank<N>.json``."""
    kwargs = {"process_group_backend": "gloo", "find_unused_parameters": name == "manual_gan"}
    if which == "runner":
        strategy = DDPCompileStrategy(compile=CompileConfig(backend="eager", optimizer=OptimizerPolicy.none), **kwargs)
    else:
        strategy = DDPStrategy(**kwargs)
    with CompileCollector() as collector:
        trace = fit(IDIOMS[name], strategy, collector=collector, devices=2, accelerator="cpu")
    figures = collector.figures()
    flat = torch.cat([v.double().flatten() for v in trace.state.values() if v.is_floating_point()])
    rank = strategy.global_rank
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps({
        "steps": trace.steps, "epochs": trace.epochs, "checksum": [float(flat.sum()), float(flat.abs().sum())],
        "graphs": figures["compile/graphs"], "graph_breaks": figures["compile/graph_breaks"],
        "recompiles": [r["step"] for r in figures["compile/recompile_reasons"]],
    }))


if __name__ == "__main__":
    main()
    # Lightning's DDPStrategy leaves a gloo group to the interpreter's finalization, which can abort
    # the process after a successful fit (runner's strategies register this at setup).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
