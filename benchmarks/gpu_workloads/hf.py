"""The ``hf_varlen`` workload of ``gpu.py``: a short fine-tune on variable-length batches, time to finish.

Eager Lightning is its reference peer: raced by every run, before any other contestant (``Workload.first``).
Every contestant trains ``batches`` (300) batches; one whose compile beside the run is still pending there trains
on until it has switched and run ``steady`` batches after its last compile (at most ``long``, 3,000), so that
its time to ``long`` batches is measured or projected from a step that no longer compiles. The job is
``gpu_workloads/hf_job.py``; what every workload measured contestant by contestant shares is ``gpu_workloads/specs.py``.
"""

from __future__ import annotations

from typing import Any

from gpu_workloads.common import Column, Context, Row, cell, fmt, ratio, unfinished_s
from gpu_workloads.specs import cache_env, child_job, one_job_row, per_contestant

HF: dict[str, Any] = {"seq": 512, "batch": 16, "batches": 300, "steady": 100, "long": 3000, "examples": None,
      "bert": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
               "vocab_size": 257, "max_position_embeddings": 512, "hidden_dropout_prob": 0.0,
               "attention_probs_dropout_prob": 0.0}}
# Batch 2 of texts cut at 128 bytes: 3 lengths in 8 batches, so the policies recompile, pad and record.
HF_QUICK: dict[str, Any] = {"seq": 128, "batch": 2, "batches": 8, "steady": 4, "long": 40, "examples": 400,
                            "bert": {**HF["bert"], "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                     "intermediate_size": 64, "max_position_embeddings": 128}}

EAGER = "lightning"
# Eager Lightning first (always), then in the order a session short of time should measure the rest (never
# measured first, in this order): the compiled Lightning peer, runner as a user gets it, runner's best.
HF_CONTESTANTS = {
    EAGER: "Lightning, eager",
    "lightning_compile": "Lightning + torch.compile(model) in the module + fused AdamW",
    "runner_defaults": "runner's defaults as a user gets them: CompileStrategy() (dynamic=automatic, cudagraphs=auto, "
                       "compile.background=auto)",
    "runner_best": "runner's best for it: CompileStrategy(dynamic=bucket 64/128/256/512, cudagraphs=reduce_overhead), "
                   "compile.background=auto",
    "runner_bucket": "the same compiling in the run (compile.background=disabled)",
    "runner_dynamic": "CompileStrategy(dynamic=dynamic, compile.background=disabled): one graph for every length",
    "lightning_compile_reduce_overhead": "Lightning + torch.compile(model, mode='reduce-overhead') + fused AdamW",
}


def _hf_jobs(ctx: Context, name: str) -> list[dict[str, Any]]:
    # Each contestant compiles cold, in a cache of its own: the time to finish includes every compile.
    return [{**child_job("gpu_workloads.hf_job:hf_varlen", ctx, name=name, size=HF_QUICK if ctx.quick else HF),
             "env": cache_env(ctx, "hf_varlen", name)}]


def finish_s(row: Row) -> float | None:
    """Seconds from the fit's call to the end of the last of ``batches`` batches (rows measured before 2026-12
    have only ``wall_s``, from the start of training: runner's setup, under a second, not counted)."""
    return row.get("finish_s") or row.get("wall_s")


def _line(row: Row) -> tuple[float, float] | None:
    """(seconds at batch 0, seconds per batch): the line through the row's last steady window."""
    end, t_end, step_ms = row.get("end_batch"), row.get("end_s"), row.get("end_step_ms")
    if end is None:  # rows from before 2026-12: the window before batch ``batches``
        end, t_end, step_ms = row.get("batches"), finish_s(row), row.get("steady_step_ms")
    if not end or t_end is None or not step_ms:
        return None
    return t_end - end * step_ms / 1e3, step_ms / 1e3


def _eager(rows: list[Row], row: Row) -> Row | None:
    return next((r for r in rows if r["contestant"] == EAGER and r.get("device") == row.get("device")
                 and "error" not in r), None)


def break_even(rows: list[Row], row: Row) -> str:
    """The batch from which the row's contestant has finished sooner than eager Lightning (both lines through
    their last steady window): ``at once`` where it already had at ``batches``, ``never`` where its step is
    no faster."""
    eager = _eager(rows, row)
    if eager is None or row is eager or row.get("settled") is False:
        return "-"
    mine, theirs = _line(row), _line(eager)
    if mine is None or theirs is None:
        return "-"
    if (finish_s(row) or 0.0) <= (finish_s(eager) or 0.0):
        return "at once"
    if mine[1] >= theirs[1]:
        return "never"
    return f"{(mine[0] - theirs[0]) / (theirs[1] - mine[1]):,.0f}"


def _long(row: Row) -> str:
    """The time to ``long`` batches, ``~`` where projected from the last steady window."""
    value = row.get("at_long_s")
    return "-" if value is None else f"{'~' if row.get('at_long_how') == 'projected' else ''}{value:.1f}"


def _vs_best_lightning(rows: list[Row], row: Row, key: str = "finish_s") -> float | None:
    """The best Lightning contestant's time (``key``) over this row's, on the same device: > 1 is faster."""
    value = finish_s if key == "finish_s" else (lambda r: r.get(key))
    peers = [r for r in rows if r["contestant"].startswith("lightning") and value(r)
             and r.get("device") == row.get("device")]
    return min(value(r) for r in peers) / value(row) if peers and value(row) else None


def _met(ok: bool) -> str:
    return "met" if ok else "missed"


def _hf_targets(rows: list[Row]) -> list[str]:
    out: list[str] = []
    mine = next((r for r in rows if r["contestant"] == "runner_defaults" and "error" not in r), None)
    eager = _eager(rows, mine) if mine else None
    if mine and eager and finish_s(mine) and finish_s(eager):
        x = (finish_s(mine) or 0.0) / (finish_s(eager) or 1.0)
        out.append(f"runner's defaults finish the {mine.get('batches')} batches in {x:.2f}x eager Lightning's time "
                   f"(target <= 1.0x: {_met(x <= 1.0)})")
        if mine.get("first_step_s") and eager.get("first_step_s"):
            f = mine["first_step_s"] / eager["first_step_s"]
            out.append(f"runner's defaults' first trained step {f:.2f}x eager Lightning's (target <= 1.1x: "
                       f"{_met(f <= 1.1)})")
    if mine and mine.get("at_long_s"):
        peers = [r for r in rows if r["contestant"].startswith("lightning") and r.get("at_long_s")
                 and r.get("device") == mine.get("device")]
        if peers:
            best = min(peers, key=lambda r: r["at_long_s"])
            y = best["at_long_s"] / mine["at_long_s"]
            out.append(f"runner's defaults finish {mine.get('long', 3000):,} batches {y:.2f}x as fast as the best "
                       f"Lightning contestant with a figure there ({best['contestant']}, {best.get('at_long_how')}; "
                       f"target >= 1.5x: {_met(y >= 1.5)})")
    runner = [r for r in rows if r["contestant"].startswith("runner") and _vs_best_lightning(rows, r)]
    if runner:
        best = min(runner, key=lambda r: finish_s(r) or float("inf"))
        x = _vs_best_lightning(rows, best) or 0.0
        out.append(f"runner's fastest ({best['contestant']}) finishes the batches {x:.2f}x as fast as the best "
                   "Lightning contestant that finished")
        # A Lightning contestant stopped at its time limit is a lower bound, not a missing peer: say what it bounds.
        for r in rows:
            limit = unfinished_s(r)
            if r["contestant"].startswith("lightning") and limit:
                out.append(f"{r['contestant']} did not finish the batches within {limit:.0f} s (stopped there): "
                           f"{best['contestant']} is at least {limit / (finish_s(best) or 1.0):.2f}x as fast")
    return out


def _vs_eager(key: str) -> Column:
    return (f"{'first step' if key == 'first_step_s' else 'finish'} vs eager",
            lambda r, rows: cell(ratio(rows, key, EAGER, r) if key in r else None, ".2f"))


HF_COLUMNS: list[Column] = [
    ("time to finish s", lambda r, rows: cell(finish_s(r), ".1f")), _vs_eager("finish_s"),
    ("first step s", fmt("first_step_s", ".2f")), _vs_eager("first_step_s"),
    ("steady step ms", fmt("steady_step_ms", ".1f")), ("at 3,000 s", lambda r, rows: _long(r)),
    ("break-even vs eager (batch)", lambda r, rows: break_even(rows, r)),
    ("compiles", fmt("compiles", "d")), ("recompiles", fmt("recompiles", "d")),
    ("CUDA graphs recorded", fmt("cudagraph_recordings", "d")),
    ("lengths", fmt("distinct_lengths", "d")), ("padding", fmt("padding_pct", ".1f")),
    ("compile beside the run", lambda r, rows: str(r.get("background") or "-").replace("|", "/")),
    ("speedup vs best Lightning", lambda r, rows: cell(_vs_best_lightning(rows, r), ".2f")),
]


def _hf_describe(quick: bool) -> str:
    s = HF_QUICK if quick else HF
    return (f"BERT-shaped classifier ({s['bert']['num_hidden_layers']} layers x {s['bert']['hidden_size']}), "
            f"{s['batches']} batches of {s['batch']} stdlib paragraphs (UTF-8 bytes, cut at {s['seq']}), each padded "
            f"to its longest; time to {s['long']:,} batches measured or projected from the last steady window")


HF_VARLEN = per_contestant("hf_varlen", _hf_describe, HF_CONTESTANTS, 100.0, _hf_jobs, one_job_row, 600, HF_COLUMNS,
                           _hf_targets, first=(EAGER,))
