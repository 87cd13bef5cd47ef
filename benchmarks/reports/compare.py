"""What ``compare.py`` prints: a table per model, the compile-cache runs, and the issue's targets, each with its
measured figure and met/missed (``--render`` prints them again from a saved result)."""

from __future__ import annotations

import statistics
from typing import Any

from harness.race import PEERS  # benchmarks/ on sys.path: run as a script


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
    in-process by ``harness/hook_clock.py``) over ``best``'s median step; the target is on the MLP. The
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
