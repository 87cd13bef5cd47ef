"""The zoo's idioms (``tests/zoo``) through ``CompileStrategy()`` against eager Lightning, one table each.

    .venv/bin/python benchmarks/idioms.py                  # every idiom, CompileStrategy() defaults (Inductor)
    .venv/bin/python benchmarks/idioms.py --quick          # 2 rounds, eager backend (plumbing check)
    .venv/bin/python benchmarks/idioms.py --idioms metrics_template manual_gan

Method: per idiom, eager Lightning and runner (``CompileStrategy()`` with its default settings: scope
``step``, Inductor, ``compile.optimizer=auto``) each train the idiom's module in their own process
(threads of one process slow each other's OpenMP kernels 2.3x; see ``compare.py``), with one torch
thread (``--threads``), on the same seed and batches, with an empty Inductor cache (cold compiles).
Each first runs ``--warmup`` steps alone (where runner compiles), then ``--rounds`` rounds of
``--turn`` steps each, taking turns (order reversed on odd rounds) so the machine's drift hits both
alike. A step is ``on_train_batch_start`` to ``on_train_batch_end`` (forward, backward, optimizer, the
deferred bookkeeping); ``vs eager`` is the median over rounds of the ratio of the rounds' median steps
(< 1: runner is faster).

Parity: every value the module logged after every step and epoch (losses, metrics, LRs), as the
largest relative difference to eager's, and the final parameters and buffers as one vector (relative
norm of the difference). Compile figures come from runner's ``CompileCollector``: graphs, graph-break
sites, recompiles (and how many came after the first step), recompile-limit hits, compile seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing
import os
import pickle
import statistics
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


def _contestant(name: str, runner: bool, backend: str, epochs: int, threads: int, conn: Any) -> None:
    """One process: train the idiom eagerly or through CompileStrategy, taking turns; send the trace."""
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    try:
        from runner import CompileConfig, CompileStrategy
        from runner.telemetry.collector import CompileCollector
        from tests.zoo.harness import fit

        idiom = IDIOMS[name]
        pacer = _Pacer(conn)
        if not runner:
            trace, figures = fit(idiom, None, max_epochs=epochs, callbacks=(pacer,)), {}
        else:
            strategy = CompileStrategy() if backend == "inductor" else \
                CompileStrategy(compile=CompileConfig(backend=backend), device="cpu")
            with CompileCollector() as collector:
                trace = fit(idiom, strategy, max_epochs=epochs, collector=collector, callbacks=(pacer,))
            figures = collector.figures() | strategy.stack.figures()
        # Plain pickle: multiprocessing's would share the tensors' memory with a process about to exit.
        conn.send(("result", pickle.dumps({"trace": trace, "figures": figures})))
    except BaseException:  # reported by the driver, with the contestant's traceback
        conn.send(("error", traceback.format_exc()))


class _Remote:
    """The driver's handle on one process: ``wait`` until it blocks at a batch start, ``grant`` steps."""

    def __init__(self, name: str, runner: bool, backend: str, epochs: int, threads: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no OpenMP or Dynamo state shared
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_contestant, args=(name, runner, backend, epochs, threads, child))
        self.proc.start()
        self.result: dict[str, Any] | None = None

    def wait(self) -> None:
        kind, payload = self.conn.recv()
        if kind == "error":
            raise RuntimeError(payload)
        if kind == "result":
            self.result = pickle.loads(payload)

    def grant(self, steps: int) -> None:
        self.conn.send(steps)

    def finish(self) -> dict[str, Any]:
        self.grant(10**9)
        while self.result is None:
            self.wait()
        self.proc.join()
        return self.result


def measure(name: str, backend: str, warmup: int, rounds: int, turn: int, threads: int = 1) -> dict[str, Any]:
    """Eager Lightning and runner on one idiom, interleaved (see the module docstring)."""
    epochs = math.ceil((warmup + rounds * turn) / 8) + 1  # the zoo's data are 8 batches an epoch
    remotes = {"eager": _Remote(name, False, backend, epochs, threads),
               "runner": _Remote(name, True, backend, epochs, threads)}
    try:
        for r in remotes.values():
            r.wait()  # built, blocked at its first batch
            r.grant(warmup)  # alone on the machine: runner compiles here
            r.wait()
        for i in range(rounds):
            for key in (("eager", "runner") if i % 2 == 0 else ("runner", "eager")):
                remotes[key].grant(turn)
                remotes[key].wait()
        results = {k: r.finish() for k, r in remotes.items()}
    finally:
        for r in remotes.values():
            if r.proc.is_alive():
                r.proc.kill()
    return summarize(name, results, warmup, rounds, turn)


def summarize(name: str, results: dict[str, Any], warmup: int, rounds: int, turn: int) -> dict[str, Any]:
    eager, runner = results["eager"]["trace"], results["runner"]["trace"]
    figures = results["runner"]["figures"]
    rows = {}
    for key, trace in (("eager", eager), ("runner", runner)):
        steady = trace.step_s[warmup:warmup + rounds * turn]
        per_round = [statistics.median(steady[i * turn:(i + 1) * turn]) for i in range(rounds)]
        q = statistics.quantiles(steady, n=4)
        rows[key] = {"median_ms": 1e3 * statistics.median(steady), "p25_ms": 1e3 * q[0], "p75_ms": 1e3 * q[2],
                     "round_medians_ms": [1e3 * m for m in per_round]}
    ratio = statistics.median(r / e for r, e in zip(rows["runner"]["round_medians_ms"],
                                                     rows["eager"]["round_medians_ms"], strict=True))
    worst, worst_key = 0.0, "-"
    for e, c in zip(eager.steps + eager.epochs, runner.steps + runner.epochs, strict=True):
        for k, v in e.items():
            diff = abs(c.get(k, math.nan) - v) / max(abs(v), 1e-8)
            if not diff <= worst:
                worst, worst_key = diff, k
    floats = [k for k, v in eager.state.items() if v.is_floating_point()]
    e_vec = torch.cat([eager.state[k].double().flatten() for k in floats])
    c_vec = torch.cat([runner.state[k].double().flatten() for k in floats])
    late = [r for r in figures["compile/recompile_reasons"] if (r["step"] or 0) >= 1]
    return {
        "idiom": name, "runner_does": IDIOMS[name].runner_does, "dropout": IDIOMS[name].dropout,
        "steps": len(eager.steps), "eager": rows["eager"], "runner": rows["runner"], "vs_eager": ratio,
        "max_rel_diff": worst, "max_rel_diff_key": worst_key,
        "params_rel_diff": float((c_vec - e_vec).norm() / e_vec.norm()),
        "graphs": figures["compile/graphs"], "graph_breaks": figures["compile/graph_breaks"],
        "recompiles": figures["compile/recompiles"], "recompiles_after_first_step": len(late),
        "limit_hits": len(figures["compile/recompile_limit_hits"]), "compile_s": figures["compile/time_s"],
        "modules_compiled": figures["compile/modules_compiled"], "optimizer": figures["compile/optimizer"],
        "recompile_reasons": [f"step {r['step']}: {r['reason'].splitlines()[0][:160]}"
                              for r in figures["compile/recompile_reasons"]],
        "graph_break_reasons": [f"{b['reason']} at {b['user_frame']}" for b in figures["compile/graph_break_reasons"]],
    }


def table(m: dict[str, Any]) -> str:
    parity = f"{m['max_rel_diff']:.1e} ({m['max_rel_diff_key']})"
    if m["dropout"]:
        parity += ", dropout masks differ"
    head = ["run", "graphs", "breaks", "recompiles (after step 1)", "limit hits", "compile s", "step ms (p25-p75)",
            "vs eager", "max rel diff, logged values", "params rel diff"]
    e, r = m["eager"], m["runner"]
    rows = [
        ["eager Lightning", "-", "-", "-", "-", "-", f"{e['median_ms']:.2f} ({e['p25_ms']:.2f}-{e['p75_ms']:.2f})",
         "1.000", "-", "-"],
        [f"CompileStrategy() (optimizer {m['optimizer']})", str(m["graphs"]), str(m["graph_breaks"]),
         f"{m['recompiles']} ({m['recompiles_after_first_step']})", str(m["limit_hits"]), f"{m['compile_s']:.1f}",
         f"{r['median_ms']:.2f} ({r['p25_ms']:.2f}-{r['p75_ms']:.2f})", f"{m['vs_eager']:.3f}", parity,
         f"{m['params_rel_diff']:.1e}"],
    ]
    lines = [f"## {m['idiom']}: {m['runner_does']}\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += [f"- recompile: {reason}" for reason in m["recompile_reasons"]]
    lines += [f"- graph break: {reason}" for reason in m["graph_break_reasons"]]
    return "\n".join(lines) + "\n"


def summary(results: list[dict[str, Any]]) -> str:
    head = ["idiom", "graphs", "breaks", "recompiles after step 1", "limit hits", "compile s", "eager ms",
            "runner ms", "vs eager", "max rel diff"]
    lines = ["## all idioms\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in results:
        lines.append("| " + " | ".join([
            m["idiom"], str(m["graphs"]), str(m["graph_breaks"]), str(m["recompiles_after_first_step"]),
            str(m["limit_hits"]), f"{m['compile_s']:.1f}", f"{m['eager']['median_ms']:.2f}",
            f"{m['runner']['median_ms']:.2f}", f"{m['vs_eager']:.3f}", f"{m['max_rel_diff']:.1e}"]) + " |")
    return "\n".join(lines)


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
    a = p.parse_args(argv)
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
    print(summary(results))
    print(f"\n{rounds} rounds x {turn} timed steps after {a.warmup} warm-up steps; {a.threads} torch thread(s) "
          f"per process; backend {backend}; "
          f"torch {torch.__version__}; load average {os.getloadavg()[0]:.1f} at the end")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"backend": backend, "rounds": rounds, "turn": turn, "threads": a.threads,
                                 "idioms": results}, indent=2))


if __name__ == "__main__":
    main()
