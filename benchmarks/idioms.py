"""The zoo's idioms (``tests/zoo``) through ``CompileStrategy()`` against eager Lightning, one table each.

    .venv/bin/python benchmarks/idioms.py                  # every idiom, CompileStrategy() defaults (Inductor)
    .venv/bin/python benchmarks/idioms.py --quick          # 2 rounds, eager backend (plumbing check)
    .venv/bin/python benchmarks/idioms.py --idioms metrics_template manual_gan
    .venv/bin/python benchmarks/idioms.py --render benchmarks/results/idioms.json   # the table, from a results file

Method: per idiom, eager Lightning and runner (``CompileStrategy()`` with its default settings: scope
``step``, Inductor, ``compile.optimizer=auto``) each train the idiom's module in their own process
(threads of one process slow each other's OpenMP kernels 2.3x; see ``compare.py``), with one torch
thread (``--threads``), on the same seed and batches, with an empty Inductor cache (cold compiles).
Each first runs ``--warmup`` steps alone (where runner compiles), then ``--rounds`` rounds of
``--turn`` steps each, taking turns (order reversed on odd rounds) so the machine's drift hits both
alike. A step is ``on_train_batch_start`` to ``on_train_batch_end`` (forward, backward, optimizer, the
deferred bookkeeping); ``vs eager`` is the median over rounds of the ratio of the rounds' median steps
(< 1: runner is faster).

Parity: the per-step losses (every logged key with "loss" in its name, and the step's returned loss)
and every value the module logged after every step and epoch (metrics, LRs), each as the largest
relative difference to eager's, and the final parameters and buffers as one vector (relative norm of
the difference). Idioms with random ops in the step (``Idiom.dropout``) compile with Inductor's
``fallback_random`` so both draw the same numbers. Compile figures come from runner's
``CompileCollector`` and the stack: frames compiled, graphs, graph-break sites, recompiles (and how
many came after the first step), recompile-limit hits, demotions (``compile/demoted``), compile seconds.
A runner fit that raises is a row of the table with its error, and the run goes on to the next idiom.
Idioms whose fit ends before ``--warmup + --rounds x --turn`` steps (``trainer.should_stop``) are
timed over the rounds both processes completed. Each idiom's row: ``reports/idioms_summary.py``; its tables:
``reports/idioms_table.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import multiprocessing
import os
import pickle
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the zoo lives in tests/ (run as a script from anywhere)

from benchmarks.reports.idioms_summary import failed, summarize  # noqa: E402
from benchmarks.reports.idioms_table import footnote, summary, table  # noqa: E402
from tests.zoo.registry import IDIOMS  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "idioms.json"


class _Pacer(Callback):
    """Blocks at a batch start when the process's turn is over, until the driver grants the next."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.left = conn, 0

    def on_train_batch_start(self, *args: Any) -> None:
        if self.left <= 0:
            self.conn.send(("done", None))
            self.left = self.conn.recv()
        self.left -= 1


def _epochs(name: str, steps: int) -> int:
    """Epochs enough for ``steps`` training batches of the idiom (its data and ``limit_train_batches``)."""
    idiom = IDIOMS[name]
    data = idiom.data()
    data.setup("fit")
    per_epoch = len(data.train_dataloader())
    limit = idiom.trainer_kwargs.get("limit_train_batches")
    if isinstance(limit, int):
        per_epoch = min(per_epoch, limit)
    return math.ceil(steps / per_epoch) + 1


def _contestant(name: str, runner: bool, backend: str, steps: int, threads: int, conn: Any) -> None:
    """One process: train the idiom eagerly or through CompileStrategy, taking turns; send the trace."""
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    figures: dict[str, Any] | None = None
    try:
        from torch._inductor import config as inductor_config

        from runner import Background, CompileConfig, CompileStrategy
        from runner.telemetry.collector import CompileCollector
        from tests.zoo.harness import fit

        idiom, epochs = IDIOMS[name], _epochs(name, steps)
        pacer = _Pacer(conn)
        if not runner:
            trace, figures = fit(idiom, None, max_epochs=epochs, callbacks=(pacer,)), {}
        else:
            # Compiled from the first step (compile.background=disabled): the table is about the compiled step.
            strategy = CompileStrategy(compile=CompileConfig(background=Background.disabled)) if backend == "inductor" \
                else CompileStrategy(compile=CompileConfig(backend=backend), device="cpu")
            # Random ops in the step: Inductor draws eager's numbers, or no value could be compared.
            random = inductor_config.patch(fallback_random=True) if idiom.dropout else contextlib.nullcontext()
            with CompileCollector() as collector, random:
                try:
                    trace = fit(idiom, strategy, max_epochs=epochs, collector=collector, callbacks=(pacer,))
                finally:  # a fit that raised still reports what it compiled and which guards hit the limit
                    figures = collector.figures() | strategy.stack.figures()
        # Plain pickle: multiprocessing's would share the tensors' memory with a process about to exit.
        conn.send(("result", pickle.dumps({"trace": trace, "figures": figures})))
    except BaseException:  # reported by the driver, with the contestant's traceback
        conn.send(("error", pickle.dumps({"traceback": traceback.format_exc(), "figures": figures})))


class _Remote:
    """The driver's handle on one process: ``wait`` until it blocks at a batch start, ``grant`` steps."""

    def __init__(self, name: str, runner: bool, backend: str, steps: int, threads: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no OpenMP or Dynamo state shared
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_contestant, args=(name, runner, backend, steps, threads, child))
        self.proc.start()
        self.result: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None

    @property
    def over(self) -> bool:
        """The fit has ended (finished, stopped itself, or raised): no more turns to give."""
        return self.result is not None or self.error is not None

    def wait(self) -> None:
        kind, payload = self.conn.recv()
        if kind == "error":
            self.error = pickle.loads(payload)
        if kind == "result":
            self.result = pickle.loads(payload)

    def grant(self, steps: int) -> None:
        self.conn.send(steps)

    def finish(self) -> dict[str, Any] | None:
        if not self.over:
            self.grant(10**9)
        while not self.over:
            self.wait()
        self.proc.join()
        return self.result


def measure(name: str, backend: str, warmup: int, rounds: int, turn: int, threads: int = 1) -> dict[str, Any]:
    """Eager Lightning and runner on one idiom, interleaved (see the module docstring)."""
    steps = warmup + rounds * turn
    remotes = {"eager": _Remote(name, False, backend, steps, threads),
               "runner": _Remote(name, True, backend, steps, threads)}
    try:
        for r in remotes.values():
            r.wait()  # built, blocked at its first batch
            if not r.over:
                r.grant(warmup)  # alone on the machine: runner compiles here
                r.wait()
        for i in range(rounds):
            if any(r.over for r in remotes.values()):
                break
            for key in (("eager", "runner") if i % 2 == 0 else ("runner", "eager")):
                if not remotes[key].over:
                    remotes[key].grant(turn)
                    remotes[key].wait()
        results = {k: r.finish() for k, r in remotes.items()}
    finally:
        for r in remotes.values():
            if r.proc.is_alive():
                r.proc.kill()
    if remotes["eager"].error is not None:
        raise RuntimeError(f"eager Lightning failed on {name}:\n{remotes['eager'].error['traceback']}")
    if remotes["runner"].error is not None:
        return failed(name, **remotes["runner"].error)
    return summarize(name, results, warmup, rounds, turn)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--idioms", nargs="+", default=list(IDIOMS), choices=list(IDIOMS))
    p.add_argument("--quick", action="store_true", help="eager backend, 2 short rounds")
    p.add_argument("--backend", default=None, help="inductor (CompileStrategy() defaults) unless --quick")
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--turn", type=int, default=None)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per process. The zoo's models are tiny: on this shared 2-core machine two "
                        "OpenMP threads spent most of each step waiting at barriers (eager metric_collection: "
                        "~80 ms a step with 2 threads, ~5 ms with 1, same CPU time as wall time)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--render", type=Path, default=None, metavar="RESULTS_JSON",
                   help="print the table of a results file (for docs/idioms.md) and measure nothing")
    a = p.parse_args(argv)
    if a.render is not None:
        run = json.loads(a.render.read_text())
        print(summary(run["idioms"]) + "\n\n" + footnote(run))
        return
    backend = a.backend or ("eager" if a.quick else "inductor")
    rounds, turn = a.rounds or (2 if a.quick else 8), a.turn or (2 if a.quick else 6)
    with tempfile.TemporaryDirectory(prefix="runner-idioms-") as scratch:
        os.environ["TMPDIR"] = tempfile.tempdir = scratch  # Inductor caches: cold compiles, removed at the end
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(scratch) / "inductor")
        try:
            results = []
            for name in a.idioms:
                results.append(measure(name, backend, a.warmup, rounds, turn, a.threads))
                print(table(results[-1]), flush=True)
        finally:
            tempfile.tempdir = None
            os.environ.pop("TMPDIR", None)
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    run = {"backend": backend, "rounds": rounds, "turn": turn, "warmup": a.warmup, "threads": a.threads,
           "torch": torch.__version__, "load_average": os.getloadavg()[0], "idioms": results}
    print(summary(results) + "\n\n" + footnote(run))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(run, indent=2))


if __name__ == "__main__":
    main()
