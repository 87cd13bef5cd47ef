"""The race of ``compare.py`` (and ``families.py``): each contestant in its own process, taking turns.

Each process (``_contestant_process``, started from the fork server's context) builds its workload, runs its
warm-up steps alone (where it compiles), then ``--turn`` timed steps per round when the driver hands it a turn,
rounds in order, reversed on odd rounds, so the machine's drift hits every contestant alike. Per contestant: the
median step, its quartiles, the compile time (first step - steady median), the time in callback hooks, the eval
loss of its trained model; and each ratio to each peer as the median over rounds of the per-round ratio of medians.
"""

from __future__ import annotations

import logging
import os
import statistics
import traceback
import warnings
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any

import torch
from contestants.compare import Contestant, Pacer
from contestants.workloads import workloads

from harness import fork_server  # benchmarks/ on sys.path: run as a script
from harness.hook_clock import HookClock

PEERS = ["lightning", "lightning_compile", "lightning_compile_fused", "hand_loop"]


def _contestant_process(env: dict[str, str], c: Contestant, model: str, quick: bool, total: int, conn: Any) -> None:
    """A contestant's process: build its workload, train ``total`` steps taking turns, report."""
    fork_server.adopt(env)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    try:
        work = workloads([model], quick)[0]
        pacer = Pacer(conn=conn, hooks=HookClock().install())
        c.run(c, work, total, pacer)
        x, y = next(iter(work.loader(seed=123)))
        assert c.model is not None
        with torch.no_grad(), torch.compiler.set_stance("force_eager"):
            eval_loss = float(torch.nn.functional.cross_entropy(c.model(x).flatten(0, -2), y.flatten()))
        conn.send(("result", {"times": pacer.times, "hook_times": pacer.hook_times, "eval_loss": eval_loss,
                              "measured": c.extra.get("measured")}))
    except BaseException:  # reported by the driver, with the contestant's traceback
        conn.send(("error", traceback.format_exc()))


class _Remote:
    """The driver's handle on one contestant process."""

    def __init__(self, ctx: BaseContext, c: Contestant, model: str, quick: bool, total: int) -> None:
        self.name = c.name
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_contestant_process, args=(dict(os.environ), c, model, quick, total, child),
                                name=c.name)
        self.proc.start()
        self.result: dict[str, Any] | None = None
        self._expect("done")  # built, waiting at its first step

    def _expect(self, kind: str) -> None:
        got, payload = self.conn.recv()
        if got == "error":
            raise RuntimeError(f"contestant {self.name} failed:\n{payload}")
        if got == "result":
            self.result = payload
        elif got != kind:
            raise RuntimeError(f"contestant {self.name}: expected {kind}, got {got}")

    def turn(self, steps: int) -> None:
        """Let the contestant run ``steps`` timed steps, and wait for them."""
        self.conn.send(steps)
        self._expect("done")

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()

    def finish(self) -> dict[str, Any]:
        self.conn.send(10**9)
        self._expect("result")
        self.proc.join()
        assert self.result is not None
        return self.result


def race(ctx: BaseContext, model: str, quick: bool, field: list[Contestant], warmup: int, rounds: int, turn: int,
         copies: int = 1, start: Callable[[Contestant, int], Any] | None = None) -> dict[str, Any]:
    """Run the contestants interleaved (see the module docstring), each process started from ``ctx``
    (``fork_server.start()``); per-contestant figures. ``start(contestant, total_steps)``: another way to start a
    contestant's process (``dpo.py``: a program of another virtual environment), returning what ``_Remote`` is
    (``turn(steps)``, ``finish() -> {"times", "hook_times", "eval_loss", "measured"}``, ``proc``).

    ``copies`` processes per contestant, taking the rounds in turn (round ``r`` is run by copy
    ``r % copies``): two processes of the same contestant measured up to 4% apart over a whole race
    here (memory placement, which core each thread lands on), which is the size of the ratios the
    targets ask about; rounds from several processes average it out instead of crowning a process."""
    share = -(-rounds // copies)  # rounds each copy runs (the last copy may run one fewer)
    total = warmup + share * turn + 1  # the last step only closes the last timed one
    remotes: dict[str, list[Any]] = {}
    begin = start or (lambda c, steps: _Remote(ctx, c, model, quick, steps))
    try:
        for c in field:
            remotes[c.name] = []
            for _ in range(copies):
                remotes[c.name].append(begin(c, total))
                remotes[c.name][-1].turn(warmup)  # compiles here, alone on the machine
        for r in range(rounds):
            for c in field if r % 2 == 0 else field[::-1]:
                remotes[c.name][r % copies].turn(turn)
        results = {name: [remote.finish() for remote in procs] for name, procs in remotes.items()}
    finally:
        for procs in remotes.values():
            for remote in procs:
                remote.kill()

    out: dict[str, Any] = {}
    for c in field:
        runs = [run["times"] for run in results[c.name]]
        times, eval_loss = runs[0], results[c.name][0]["eval_loss"]
        by_round = [round_times(runs, r, warmup, turn) for r in range(rounds)]
        per_round = [statistics.median(ts) for ts in by_round]
        steady = [t for ts in by_round for t in ts]
        q = statistics.quantiles(steady, n=4) if len(steady) > 1 else [steady[0]] * 3
        hook_runs = [run["hook_times"] for run in results[c.name]]
        hooks = [t for r in range(rounds) for t in round_times(hook_runs, r, warmup, turn)]
        out[c.name] = {
            "label": c.label,
            "median_ms": 1e3 * statistics.median(steady),
            "p25_ms": 1e3 * q[0],
            "p75_ms": 1e3 * q[2],
            "first_step_s": times[0],
            "compile_s": times[0] - statistics.median(steady),
            "round_medians_ms": [1e3 * m for m in per_round],
            # Mean time per step in callback hooks (harness/hook_clock.py): a mean, so the work done every
            # log_every_n_steps counts, amortised, as it does in throughput.
            "hooks_ms": 1e3 * statistics.fmean(hooks),
            # The typical step's time in hooks: one stall (a garbage collection, the VM's neighbours)
            # inside a hook moves the mean of a short run by milliseconds, not the median.
            "hooks_median_ms": 1e3 * statistics.median(hooks),
            "eval_loss": eval_loss,
            "measured": results[c.name][0].get("measured"),  # what the contestant measured itself, if anything
        }
    add_ratios(out)
    return out


def round_times(runs: list[list[float]], r: int, warmup: int, turn: int) -> list[float]:
    """Round ``r``'s timed steps, given each copy's step times: the ``r // copies``-th turn of copy
    ``r % copies`` (rounds go to the copies in turn; each copy's warm-up steps come first)."""
    copies = len(runs)
    j = r // copies
    return runs[r % copies][warmup + j * turn:warmup + (j + 1) * turn]


def add_ratios(figs: dict[str, Any], peers: list[str] = PEERS) -> None:
    """Each contestant against each peer: the median over rounds of the ratio of round medians."""
    for fig in figs.values():
        fig["ratio"] = {
            peer: statistics.median(
                a / b for a, b in zip(fig["round_medians_ms"], figs[peer]["round_medians_ms"], strict=True))
            for peer in peers if peer in figs
        }
