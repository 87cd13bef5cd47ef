"""runner against the tools its users would pick instead, interleaved in one process.

    .venv/bin/python benchmarks/compare.py            # full run: gpt, many_params, overhead; cold/warm compile
    .venv/bin/python benchmarks/compare.py --quick    # tiny sizes, seconds of steps (the test uses it)

Method: every contestant (``contestants.py``) trains its own copy of the same model (same seed) on
the same batches (same DataLoader seed) with the same AdamW hyper-parameters, in its own process
(threads of one process slow each other's OpenMP kernels: see ``contestants.py``), forked from a server that
has imported torch and Lightning and run nothing (``fork_server.py``).
The driver first lets each contestant build and run its warm-up steps alone (the first step is
where compilation happens: compile time = first step - steady median), then runs ``--rounds``
rounds in which every contestant in turn runs ``--turn`` timed steps (order reversed on odd
rounds). Each contestant runs in ``--copies`` processes that take the rounds in turn, so one
process's luck (memory placement, cores) does not decide a ratio. A step is the time between two
consecutive step starts. Reported: the median step per
contestant, and each ratio as the median over rounds of the per-round ratio of medians, which
cancels the machine's drift. Finally the cold/warm compile runs (``compile_cache.py``). Prints
markdown tables; writes ``benchmarks/results/compare.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import traceback
import warnings
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import fork_server  # sibling modules: run as a script
import lightning
import torch
from compile_cache import child, cold_warm  # sibling modules: run as a script
from contestants import (
    Contestant,
    Pacer,
    Workload,
    bf16_contestants,
    contestants,
    gpt_workload,
    many_params_workload,
)
from family_workloads import FAMILIES, family_workload
from hook_clock import HookClock
from peft_contestants import CPU, CPU_QUICK, llama_workload

from runner.config.schema import Scope

MODELS = ("gpt", "many_params", "overhead", "gpt_bf16")
PEERS = ["lightning", "lightning_compile", "lightning_compile_fused", "hand_loop"]
OUT = Path(__file__).resolve().parent / "results" / "compare.json"


def workloads(names: list[str], quick: bool) -> list[Workload]:
    """Full sizes: the quickstart GPT (``GPT()`` defaults, seq 256, batch 16), a 50-deep MLP (204 tensors),
    and ``overhead``: a one-block MLP of width 4 whose step is nearly all framework."""
    out = []
    for name in names:
        if name in FAMILIES:  # families.py's: transformers and timm models
            out.append(family_workload(name, quick))
        elif name == "llama_peft":  # peft.py's: LoRA and full fine-tunes of one Llama-style model
            out.append(llama_workload(CPU_QUICK if quick else CPU, 20_000 if quick else 4_000_000))
        elif name in ("gpt", "gpt_bf16"):
            sizes = (1, 16, 2, 16, 2, 20_000) if quick else (4, 128, 4, 256, 16, 4_000_000)
            work = gpt_workload(*sizes)
            if name == "gpt_bf16":
                work.name, work.describe = name, work.describe + ", bf16-mixed"
            out.append(work)
        elif name == "many_params":
            out.append(many_params_workload(*((8, 4, 4) if quick else (128, 50, 256))))
        else:
            # Framework cost alone: a step of a few microseconds of compute, so what is left is each
            # tool's per-step machinery (hooks, closure, logging, guards). Many steps per turn.
            out.append(many_params_workload(4, 1, 4, samples=16384, name="overhead", turn_scale=1 if quick else 20))
    return out


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

    def finish(self) -> dict[str, Any]:
        self.conn.send(10**9)
        self._expect("result")
        self.proc.join()
        assert self.result is not None
        return self.result


def race(ctx: BaseContext, model: str, quick: bool, field: list[Contestant], warmup: int, rounds: int, turn: int,
         copies: int = 1) -> dict[str, Any]:
    """Run the contestants interleaved (see the module docstring), each process started from ``ctx``
    (``fork_server.start()``); per-contestant figures.

    ``copies`` processes per contestant, taking the rounds in turn (round ``r`` is run by copy
    ``r % copies``): two processes of the same contestant measured up to 4% apart over a whole race
    here (memory placement, which core each thread lands on), which is the size of the ratios the
    targets ask about; rounds from several processes average it out instead of crowning a process."""
    share = -(-rounds // copies)  # rounds each copy runs (the last copy may run one fewer)
    total = warmup + share * turn + 1  # the last step only closes the last timed one
    remotes: dict[str, list[_Remote]] = {}
    try:
        for c in field:
            remotes[c.name] = []
            for _ in range(copies):
                remotes[c.name].append(_Remote(ctx, c, model, quick, total))
                remotes[c.name][-1].turn(warmup)  # compiles here, alone on the machine
        for r in range(rounds):
            for c in field if r % 2 == 0 else field[::-1]:
                remotes[c.name][r % copies].turn(turn)
        results = {name: [remote.finish() for remote in procs] for name, procs in remotes.items()}
    finally:
        for procs in remotes.values():
            for remote in procs:
                if remote.proc.is_alive():
                    remote.proc.kill()

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
            # Mean time per step in callback hooks (hook_clock.py): a mean, so the work done every
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


def table(figs: dict[str, Any], best: str) -> str:
    peers = [p for p in PEERS if p in next(iter(figs.values()))["ratio"]]
    head = ["contestant", "median ms", "p25-p75 ms", "compile s", *[f"vs {p}" for p in peers], "eval loss"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, f in figs.items():
        label = f"**{f['label']}**" if name == best else f["label"]
        cells = [label, f"{f['median_ms']:.2f}", f"{f['p25_ms']:.2f}-{f['p75_ms']:.2f}", f"{f['compile_s']:.1f}",
                 *[f"{f['ratio'][p]:.3f}" for p in peers], f"{f['eval_loss']:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    if Path("/proc/cpuinfo").exists():
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "lightning": lightning.__version__, "python": platform.python_version(),
            "load_avg": os.getloadavg(), "date": datetime.datetime.now().isoformat(timespec="seconds")}


def bf16_support() -> tuple[bool, str]:
    """Whether the bf16-mixed race is worth running here, and why. On a CPU without bf16 matmul units
    (AVX-512-BF16 or AMX) torch emulates bf16 matmuls ~100x slower than fp32: the race would take hours
    and measure the emulation."""
    flags: set[str] = set()
    if Path("/proc/cpuinfo").exists():
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("flags"):
                flags = set(ln.split(":", 1)[1].split())
                break
    units = sorted(flags & {"avx512_bf16", "amx_bf16"})
    if units:
        return True, f"CPU bf16 units: {', '.join(units)}"
    return False, ("skipped by default: this CPU has no bf16 matmul units (no avx512_bf16/amx_bf16 flag), so "
                   "bf16 matmuls are emulated; run it with --models gpt_bf16")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny models and few steps (plumbing check)")
    p.add_argument("--models", nargs="+", default=None, choices=MODELS,
                   help="default: all; gpt_bf16 only where the CPU has bf16 matmul units (see bf16_support)")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--scopes", nargs="+", default=["step", "step_backward", "model", "blocks"])
    p.add_argument("--options", nargs="*", default=["cpp_wrapper"],
                   help="boolean Inductor options, each tried on runner's best scope as one more contestant")
    p.add_argument("--best", default="step", help="runner's configuration for this device (compile.scope; "
                   "step: forward+loss compiled, AOT-compiled backward, fused AdamW measured fastest here)")
    p.add_argument("--no-fused-peer", action="store_true", help="skip Lightning + compile + fused AdamW")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--turn", type=int, default=None, help="timed steps per contestant per round")
    p.add_argument("--copies", type=int, default=None,
                   help="processes per contestant, taking the rounds in turn (default: 2, 1 with --quick)")
    p.add_argument("--no-cache-runs", action="store_true", help="skip the cold/warm compile processes")
    p.add_argument("--cache-model", default="gpt", choices=["gpt", "many_params"])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--render", type=Path, help="print the tables of a saved JSON result instead of running")
    # internal: one cold/warm compile process
    p.add_argument("--cache-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--save-artifacts", help=argparse.SUPPRESS)
    p.add_argument("--load-artifacts", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.models is None:
        a.models = [m for m in MODELS if m != "gpt_bf16" or bf16_support()[0]]
    a.warmup = a.warmup or (2 if a.quick else 3)
    a.rounds = a.rounds or (2 if a.quick else 16)
    a.turn = a.turn or (2 if a.quick else 6)
    a.copies = a.copies or (1 if a.quick else 2)
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    if a.render:
        result = json.loads(a.render.read_text())
        for m in result["models"].values():
            add_ratios(m["contestants"])
        result["targets"] = targets(result, f"runner_{a.best}")
        print(report(result, f"runner_{a.best}"))
        return
    if a.cache_child:
        work = workloads([a.cache_model], a.quick)[0]
        steps = a.warmup + 4
        print(json.dumps(child(work, Scope(a.best), a.backend, steps, a.save_artifacts, a.load_artifacts)))
        return
    ctx = fork_server.start()
    with tempfile.TemporaryDirectory(prefix="runner-bench-") as scratch:
        # Every temporary file of the run (Inductor caches, contestants' CSV logs, the cold/warm child
        # processes' files, which inherit TMPDIR) lands here and is removed at the end.
        os.environ["TMPDIR"] = tempfile.tempdir = scratch
        try:
            run(a, ctx)
        finally:
            tempfile.tempdir = None
            os.environ.pop("TMPDIR", None)


def run(a: argparse.Namespace, ctx: BaseContext) -> None:
    """The race on each model, then the cold/warm compile runs; prints and writes the result."""
    # A fresh Inductor cache: compile times in the race are cold, except for graphs an earlier
    # contestant of this run already compiled (those hit the FX-graph cache).
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    scopes = [Scope(s) for s in a.scopes]
    result: dict[str, Any] = {"machine": machine(), "method": __doc__, "args": {k: str(v) for k, v in vars(a).items()},
                              "models": {}, "bf16": bf16_support()[1]}
    best = f"runner_{a.best}"
    for work in workloads(a.models, a.quick):
        if work.name == "gpt_bf16":
            field = bf16_contestants(a.backend, Scope(a.best))
        else:
            field = contestants(a.backend, scopes, Scope(a.best), fused_peer=not a.no_fused_peer,
                                options=tuple(a.options) if a.backend == "inductor" else ())
        figs = race(ctx, work.name, a.quick, field, a.warmup, a.rounds, a.turn * work.turn_scale, a.copies)
        result["models"][work.name] = {"describe": work.describe, "turn": a.turn * work.turn_scale,
                                       "contestants": figs}
        print(f"{work.name}: done", file=sys.stderr, flush=True)
    if not a.no_cache_runs:
        argv_child = ["--cache-model", a.cache_model, "--best", a.best, "--backend", a.backend,
                      *(["--quick"] if a.quick else [])]
        result["compile_cache"] = {"model": a.cache_model, "contestant": best, **cold_warm(argv_child)}
    result["targets"] = targets(result, best)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(report(result, best) + f"\nwrote {a.out}")


def report(result: dict[str, Any], best: str) -> str:
    """The markdown tables: one per model, the compile-cache runs, the targets."""
    m, a = result["machine"], result["args"]
    out = [f"# runner benchmarks ({m['cpu']}, {m['cores']} cores, load average {m['load_avg'][0]:.1f} at start, "
           f"torch {m['torch']}, lightning {m['lightning']}, backend {a['backend']}, {m['date']})\n",
           f"{a['rounds']} rounds x {a['turn']} timed steps per contestant, in {a.get('copies', '1')} process(es) "
           f"per contestant taking the rounds in turn, after {a['warmup']} warm-up steps; fp32; "
           "(bf16-mixed where the model says so); ratios = median over rounds of per-round median ratios "
           "(< 1: faster than that peer); compile s = first "
           "step - median step, in race order, so a contestant whose graphs an earlier one compiled reuses them "
           "(Dynamo/FX-graph caches): compile cost is measured in separate processes below\n"]
    for name, model in result["models"].items():
        turn = f" ({model['turn']} timed steps per turn)" if str(model.get("turn", a["turn"])) != a["turn"] else ""
        out.append(f"## {name}: {model['describe']}{turn}\n\n{table(model['contestants'], best)}\n")
    cache = result.get("compile_cache")
    if cache:
        out += [f"## compile time, {cache['model']}, {cache['contestant']}: separate processes\n",
                "| run | compile s | first step s |\n|---|---|---|"]
        out += [f"| {k} | {cache[k]['compile_s']:.2f} | {cache[k]['first_step_s']:.2f} |"
                for k in ("cold", "warm", "artifacts")]
        if cache["warm_over_cold"] is not None:
            out.append(f"\nwarm / cold = {cache['warm_over_cold']:.3f}; artifacts (fresh cache dir + "
                       f"load_cache_artifacts) / cold = {cache['artifacts_over_cold']:.3f}\n")
    out.append("## targets\n\n" + "\n".join(f"- {t}" for t in result["targets"]))
    return "\n".join(out)


LOSS_RTOL = 0.005
"""Same eval loss: every contestant within 0.5% of runner's (same seed and batches; compiled kernels
reorder float sums, so bit equality is not expected)."""


def targets(result: dict[str, Any], best: str) -> list[str]:
    """The issue's targets, each with its measured figure and met/missed."""
    out = []
    models = result["models"]
    for model, m in models.items():
        figs = m["contestants"]
        if model == "overhead":
            out += overhead_targets(models, best)
            continue
        r = figs.get(best, {}).get("ratio", {})
        bounds = [("lightning", 1.0), ("lightning_compile", 1.0), ("lightning_compile_fused", 0.97)]
        if model in ("gpt", "many_params"):
            bounds.append(("hand_loop", 1.05))
        for peer, bound in bounds:
            if peer in r:
                ok = "met" if r[peer] <= bound else "MISSED"
                out.append(f"{model}: {best} / {peer} = {r[peer]:.3f} (target <= {bound}): {ok}")
        if best in figs:
            ref = figs[best]["eval_loss"]
            worst = max(figs, key=lambda n: abs(figs[n]["eval_loss"] - ref))
            diff = abs(figs[worst]["eval_loss"] - ref) / abs(ref)
            ok = "met" if diff <= LOSS_RTOL else "MISSED"
            out.append(f"{model}: eval loss {ref:.4f}, largest difference {100 * diff:.3f}% ({worst}) "
                       f"(target <= {100 * LOSS_RTOL:g}%): {ok}")
        if "runner_cli" in figs and best in figs:
            out.append(callbacks_line(model, figs, best))
    cache = result.get("compile_cache")
    if cache and cache["warm_over_cold"] is not None:
        ok = "met" if cache["warm_over_cold"] <= 0.25 else "MISSED"
        out.append(f"warm / cold compile = {cache['warm_over_cold']:.3f} (target <= 0.25): {ok}")
    if "bf16" in result and "gpt_bf16" not in models:
        out.append(f"gpt_bf16: {result['bf16']}")
    return out


def callbacks_line(model: str, figs: dict[str, Any], best: str) -> str:
    """The callbacks' cost per step: their time in hooks (``runner_cli`` minus ``best``, measured
    in-process by ``hook_clock.py``) over ``best``'s median step; the target is on the MLP. The
    step-time difference between the two contestants' processes follows, as a cross-check that
    carries the processes' noise (up to 4% here)."""
    cli, ref = figs["runner_cli"], figs[best]
    extra = cli["hooks_ms"] - ref["hooks_ms"]
    cost = extra / ref["median_ms"]
    steps = statistics.median(a / b for a, b in zip(cli["round_medians_ms"], ref["round_medians_ms"], strict=True)) - 1
    line = (f"{model}: telemetry and reliability callbacks cost {100 * cost:.2f}% of the step "
            f"({1e3 * extra:.0f} us per step in callback hooks; step times of the two processes differ by "
            f"{100 * steps:+.2f}%)")
    return line + (f" (target < 1%): {'met' if cost < 0.01 else 'MISSED'}" if model == "many_params" else "")


def overhead_targets(models: dict[str, Any], best: str) -> list[str]:
    """The framework-cost line, and the target: ``best`` costs less per step than Lightning +
    compile + fused AdamW on the overhead model."""
    out = [overhead_line(models, best)]
    figs = models["overhead"]["contestants"]
    peer = "lightning_compile_fused"
    if best in figs and peer in figs:
        ours, theirs = (figs[n]["median_ms"] - figs["hand_loop"]["median_ms"] for n in (best, peer))
        ok = "met" if ours < theirs else "MISSED"
        out.append(f"overhead: framework cost {best} {ours:.3f} ms vs {peer} {theirs:.3f} ms (target: below): {ok}")
    return out


def overhead_line(models: dict[str, Any], best: str) -> str:
    """Per-step framework cost (``overhead`` model, median minus the hand loop's), next to each other
    model's gap between ``best`` and the hand loop: how much of that gap the framework explains."""
    def over_hand_loop(figs: dict[str, Any], name: str) -> float:
        return figs[name]["median_ms"] - figs["hand_loop"]["median_ms"]

    figs = models["overhead"]["contestants"]
    floor = figs["hand_loop"]["median_ms"]
    cost = ", ".join(f"{name} +{over_hand_loop(figs, name):.2f} ms" for name in figs
                     if name != "hand_loop" and name in (*PEERS, best))
    gaps = "; ".join(f"{name}: {over_hand_loop(m['contestants'], best):+.2f} ms" for name, m in models.items()
                     if name != "overhead" and {best, "hand_loop"} <= m["contestants"].keys())
    return (f"framework cost per step over the hand loop ({floor:.2f} ms), overhead model: {cost}. "
            f"{best} minus hand loop on the other models: {gaps or '-'}")


if __name__ == "__main__":
    main()
