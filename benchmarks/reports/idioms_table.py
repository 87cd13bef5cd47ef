"""The idiom benchmark's tables (``benchmarks/idioms.py``): one section per idiom as it is measured, and
the table of all idioms that docs/idioms.md shows, rendered from a results file's rows."""

from __future__ import annotations

from typing import Any


def _ms(row: dict[str, Any]) -> str:
    return f"{row['median_ms']:.2f} ({row['p25_ms']:.2f}-{row['p75_ms']:.2f})"


def table(m: dict[str, Any]) -> str:
    """One idiom's section: eager Lightning and runner side by side, then every recompile and break."""
    if "error" in m:
        guards = "".join(f"\n- recompile limit hit on `{g}`" for g in m.get("limit_hit_guards", []))
        return f"## {m['idiom']}: {m['runner_does']}\n\nCompileStrategy() raised: `{m['error']}`{guards}\n"
    loss = f"{m['loss_rel_diff']:.1e} ({m['loss_rel_diff_key']})"
    parity = f"{m['max_rel_diff']:.1e} ({m['max_rel_diff_key']})"
    if m["dropout"]:
        loss += ", fallback_random"
    head = ["run", "frames", "graphs", "breaks", "recompiles (after step 1)", "limit hits", "demoted", "compile s",
            "step ms (p25-p75)", "vs eager", "loss rel diff", "max rel diff, logged values", "params rel diff"]
    rows = [
        ["eager Lightning", "-", "-", "-", "-", "-", "-", "-", _ms(m["eager"]), "1.000", "-", "-", "-"],
        [f"CompileStrategy() (optimizer {m['optimizer']})", str(m["frames"]), str(m["graphs"]), str(m["graph_breaks"]),
         f"{m['recompiles']} ({m['recompiles_after_first_step']})", str(m["limit_hits"]), str(len(m["demoted"])),
         f"{m['compile_s']:.1f}", _ms(m["runner"]), f"{m['vs_eager']:.3f}", loss, parity,
         f"{m['params_rel_diff']:.1e}"],
    ]
    lines = [f"## {m['idiom']}: {m['runner_does']}\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if m["timed_rounds"] < 1:
        lines.append("- not timed: the fit ended before the first timed round")
    lines += [f"- demoted: {d}" for d in m["demoted"]]
    lines += [f"- recompile: {reason}" for reason in m["recompile_reasons"]]
    lines += [f"- graph break: {reason}" for reason in m["graph_break_reasons"]]
    return "\n".join(lines) + "\n"


def summary(results: list[dict[str, Any]]) -> str:
    """The table of every idiom: what compiled, what recompiled, parity and step time against eager
    (a results file written before frames, demotions and loss parity were measured shows "-" there)."""
    head = ["idiom", "frames", "graphs", "breaks", "recompiles after step 1", "limit hits", "demoted", "compile s",
            "loss rel diff", "eager ms", "runner ms", "vs eager"]
    lines = ["## all idioms\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in results:
        if "error" in m:
            guards = "; ".join(m.get("limit_hit_guards", []))[:120]
            hit = f" (limit hit on `{guards}`)" if guards else ""
            lines.append(f"| {m['idiom']} | raised: {m['error'][:120]}{hit} |" + " |" * (len(head) - 2))
            continue
        loss = f"{m['loss_rel_diff']:.1e}" if "loss_rel_diff" in m else "-"
        lines.append("| " + " | ".join([
            m["idiom"], str(m.get("frames", "-")), str(m["graphs"]), str(m["graph_breaks"]),
            str(m["recompiles_after_first_step"]), str(m["limit_hits"]), str(len(m.get("demoted", []))),
            f"{m['compile_s']:.1f}", loss + (" (fallback_random)" if m["dropout"] and "loss_rel_diff" in m else ""),
            f"{m['eager']['median_ms']:.2f}", f"{m['runner']['median_ms']:.2f}", f"{m['vs_eager']:.3f}"]) + " |")
    return "\n".join(lines)


def footnote(run: dict[str, Any]) -> str:
    """How the table was measured, from the results file's own settings."""
    return (f"{run['rounds']} rounds x {run['turn']} timed steps after {run.get('warmup', 8)} warm-up steps; "
            f"{run['threads']} torch thread(s) per process; backend {run['backend']}; torch {run.get('torch', '?')}; "
            f"load average {run.get('load_average', float('nan')):.1f} at the end")
