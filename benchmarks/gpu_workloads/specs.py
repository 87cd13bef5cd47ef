"""The ``memory`` and ``cold_start`` workloads of ``gpu.py`` (sizes, contestants, rows, tables), and what every
workload measured contestant by contestant shares (``per_contestant``; ``hf_varlen`` is in ``gpu_workloads/hf.py``).

Each is measured contestant by contestant (a contestant is its unit of cost): a run takes its contestants in
their order of need (its reference peers, then never measured, then oldest) and as many as the session's budget
holds, and a row is written as soon as its contestant's jobs end. Ratios between contestants are taken when the tables
are written, between rows measured on the same device. The jobs themselves are in ``gpu_workloads/jobs.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_workloads.common import NOT_STARTED, Column, Context, Row, RunFile, Workload, cell, fmt, ratio, run_jobs
from gpu_workloads.results import contestant_order

LLAMA: dict[str, Any] = {"seq": 2048, "batches": [2, 4], "steps": [2, 3], "cap_gib": 24.0,
         "llama": {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 24, "num_attention_heads": 16,
                   "num_key_value_heads": 16, "vocab_size": 32000}}
LLAMA_QUICK: dict[str, Any] = {**LLAMA, "seq": 64, "steps": [1, 2],
               "llama": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                         "num_key_value_heads": 4, "vocab_size": 256}}
COLD: dict[str, Any] = {"n_layer": 4, "n_embd": 128, "n_head": 4, "seq": 256, "batch": 16}
COLD_QUICK: dict[str, Any] = {"n_layer": 2, "n_embd": 32, "n_head": 2, "seq": 32, "batch": 4}

MEMORY_CONTESTANTS = {
    "lightning_compile": "Lightning + torch.compile(model) in the module + fused AdamW",
    "runner_checkpoint": "CompileStrategy(compile.scope=blocks, offload=checkpoint): every block recomputed",
    "runner_checkpoint_budget": "CompileStrategy(compile.scope=blocks, offload=checkpoint, memory_budget=0.5)",
    **{f"runner_{s}": f"CompileStrategy(compile.scope=blocks, offload={s})" for s in ("fp8", "bf16", "cpu", "none")},
}
COLD_CONTESTANTS = {"runner": "runner's defaults: CompileStrategy() (on a GPU, compile.background=auto compiles beside "
                              "the run where the device has room: the first steps train eagerly)",
                    "lightning_compile": "Lightning + torch.compile(model) in the module + fused AdamW",
                    "runner_in_run": "CompileStrategy(compile.background=disabled): compiling in the first step"}


def cache_env(ctx: Context, *parts: str) -> dict[str, str]:
    """A compile cache of its own: Inductor's and Triton's directories under the run's scratch."""
    root = ctx.scratch.joinpath(*parts)
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton")}


def contestant_runner(workload: str, contestants: dict[str, str],
                      jobs_of: Callable[[Context, str], list[dict[str, Any]]], row_of: Callable[[list[Row]], Row],
                      timeout_s: float, first: tuple[str, ...] = ()) -> Callable[[Context, RunFile, int], None]:
    """The run of a workload measured contestant by contestant: the first ``n`` in order of need (the reference
    peers ``first`` before any other), all their jobs handed to ``run_jobs`` at once (one child each on a GPU), a
    contestant's row written as soon as its last job ends. A contestant none of whose jobs started gets no row."""
    def run(ctx: Context, out: RunFile, n: int) -> None:
        picked = ctx.pick(list(contestants), first)
        chosen = contestant_order(ctx.shared.get("results") or {"rows": []}, workload, picked, first)[:n]
        tagged = [(c, job) for c in chosen for job in jobs_of(ctx, c)]
        got: dict[str, list[Row]] = {c: [] for c in chosen}
        rows: list[Row] = []
        results: list[Row] = []

        def on_result(i: int, result: Row) -> None:
            name = tagged[i][0]
            got[name].append(result)
            results.append(result)
            if len(got[name]) < sum(1 for c, _ in tagged if c == name):
                return
            if all(r.get("error") == NOT_STARTED for r in got[name]):
                return
            failed = next((r["error"] for r in got[name] if "error" in r), None)
            rows.append({"contestant": name, "label": contestants[name],
                         **({"error": failed} if failed else row_of(got[name]))})
            print(f"{workload} {name}: {'FAILED' if failed else 'measured'}", flush=True)
            out.data["units"] = len(rows)
            out.update(rows, results, complete=len(rows) == len(contestants))

        run_jobs([job for _, job in tagged], ctx, timeout_s, on_result=on_result)
        out.update(rows, results, complete=len(rows) == len(contestants))

    return run


def per_contestant(name: str, describe: Callable[[bool], str], contestants: dict[str, str], unit_cost_s: float,
                   jobs_of: Callable[[Context, str], list[dict[str, Any]]], row_of: Callable[[list[Row]], Row],
                   timeout_s: float, columns: list[Column], targets: Callable[[list[Row]], list[str]],
                   first: tuple[str, ...] = ()) -> Workload:
    """A workload measured contestant by contestant (``contestant_runner``); ``first``: its reference peers."""
    return Workload(name, describe, contestants, unit_cost_s,
                    contestant_runner(name, contestants, jobs_of, row_of, timeout_s, first), columns, targets,
                    first=first)


def child_job(call: str, ctx: Context, **args: Any) -> dict[str, Any]:
    """A job of ``gpu_workloads/child.py``: ``call`` is ``module:function``, or a function of ``gpu_workloads.jobs``."""
    return {"call": call if ":" in call else f"gpu_workloads.jobs:{call}",
            "args": {"device": ctx.device, "backend": ctx.backend, **args}}


def one_job_row(results: list[Row]) -> Row:
    """A one-job contestant's row: its job's figures (the device goes to the run file)."""
    return {k: v for k, v in results[0].items() if k not in ("device", "startup_s")}


# -- memory -------------------------------------------------------------------------------------------------------
def _memory_jobs(ctx: Context, name: str) -> list[dict[str, Any]]:
    size = LLAMA_QUICK if ctx.quick else LLAMA
    return [child_job("memory", ctx, name=name, size=size, cap_gib=size["cap_gib"])]


def _best_runner(rows: list[Row], key: str) -> Row | None:
    runner = [r for r in rows if r["contestant"].startswith("runner") and r.get(key)]
    return max(runner, key=lambda r: r[key]) if runner else None


def _memory_targets(rows: list[Row]) -> list[str]:
    best = _best_runner(rows, "max_batch")
    x = ratio(rows, "max_batch", "lightning_compile", best) if best else None
    if best is None or x is None:
        return []
    t = ratio(rows, "tokens_per_s_at_max", "lightning_compile", best) or 0.0
    return [f"runner's best strategy ({best['contestant']}) fits {x:.2f}x the batch of Lightning + compile under "
            f"{best.get('cap_gib')} GiB (target >= 1.5x: {'met' if x >= 1.5 else 'missed'}), at {t:.2f}x its tokens/s "
            f"(target >= 1.2x: {'met' if t >= 1.2 else 'missed'})"]


MEMORY_COLUMNS: list[Column] = [
    ("peak GiB at ref batch", fmt("peak_gib", ".2f")), ("step ms at ref batch", fmt("step_ms", ".0f")),
    ("largest batch under the cap", fmt("max_batch", "d")), ("tokens/s at it", fmt("tokens_per_s_at_max", ",.0f")),
    ("batch vs Lightning + compile", lambda r, rows: cell(ratio(rows, "max_batch", "lightning_compile", r), ".2f")),
    ("tokens/s vs Lightning + compile",
     lambda r, rows: cell(ratio(rows, "tokens_per_s_at_max", "lightning_compile", r), ".2f")),
]
def _memory_describe(quick: bool) -> str:
    s = LLAMA_QUICK if quick else LLAMA
    return (f"Llama-style LM ({s['llama']['num_hidden_layers']} layers x {s['llama']['hidden_size']}, vocab "
            f"{s['llama']['vocab_size']}), seq {s['seq']}, reference batch {s['batches'][1]}, cap {s['cap_gib']:g} GiB")


MEMORY = per_contestant("memory", _memory_describe, MEMORY_CONTESTANTS, 150.0, _memory_jobs, one_job_row, 900,
                        MEMORY_COLUMNS, _memory_targets)


# -- cold_start ---------------------------------------------------------------------------------------------------
def _cold_jobs(ctx: Context, name: str) -> list[dict[str, Any]]:
    # The same cache directory twice: empty for the cold process, filled by it for the warm one. --quick puts
    # each phase's jobs in one child (group), so the warm jobs still run in a second process.
    size = COLD_QUICK if ctx.quick else COLD
    return [{**child_job("first_steps", ctx, name=name, size=size), "env": cache_env(ctx, "cold_start", name),
             "group": phase} for phase in ("cold", "warm")]


def _cold_row(results: list[Row]) -> Row:
    cold, warm = results
    return {"cold_first_step_s": cold["first_step_s"], "cold_tenth_step_s": cold["tenth_step_s"],
            "warm_first_step_s": warm["first_step_s"], "warm_tenth_step_s": warm["tenth_step_s"],
            "cold_compiles": cold["compiles"], "warm_compiles": warm["compiles"],
            "startup_s": cold.get("startup_s"), "warm_over_cold": warm["first_step_s"] / cold["first_step_s"]}


def _cold_targets(rows: list[Row]) -> list[str]:
    return [f"{r['contestant']}: warm-cache first step {r['warm_over_cold']:.2f}x of cold (target <= 0.3x: "
            f"{'met' if r['warm_over_cold'] <= 0.3 else 'missed'})" for r in rows if r.get("warm_over_cold")]


COLD_COLUMNS: list[Column] = [
    ("cold: first step s", fmt("cold_first_step_s", ".1f")), ("cold: 10th step s", fmt("cold_tenth_step_s", ".1f")),
    ("warm: first step s", fmt("warm_first_step_s", ".1f")), ("warm: 10th step s", fmt("warm_tenth_step_s", ".1f")),
    ("warm / cold first step", fmt("warm_over_cold", ".2f")), ("interpreter + imports s", fmt("startup_s", ".1f")),
]
COLD_START = per_contestant(
    "cold_start", lambda quick: (
        "GPT {n_layer}x{n_embd}, seq {seq}, batch {batch}: 10 steps in a fresh process, cold, then warm from the "
        "local compile cache the cold process filled").format(**(COLD_QUICK if quick else COLD)),
    COLD_CONTESTANTS, 75.0, _cold_jobs, _cold_row, 300, COLD_COLUMNS, _cold_targets)
