"""LoRA and QLoRA through runner against a full fine-tune and against HF peft, on the CPU: one Llama-style model.

    .venv/bin/python benchmarks/lora_qlora.py            # full run: the CPU size of contestants/adapters.py, Inductor
    .venv/bin/python benchmarks/lora_qlora.py --quick    # tiny model, Dynamo's eager backend, a few steps (the test's)

compare.py's method (``compare.race``): each contestant (``contestants/adapters.py``: eager Lightning first, then
Lightning + HF peft eager and compiled, runner full, LoRA and QLoRA) trains its own copy of the model (same seed)
on the same batches in its own process, warm-up alone, then interleaved rounds of timed steps; each ratio is the
median over rounds of the per-round ratio of median steps. Beside the step: tokens/s, the graph breaks and
recompiles of the contestant's process, its peak memory (resident set on the CPU), its optimizer's state and its
trainable parameters. Targets (issue 70): runner LoRA >= 1.25x runner's full fine-tune in tokens/s, never slower
than Lightning + peft + compile, its optimizer state <= 2% of the full fine-tune's. Prints a markdown table;
writes ``benchmarks/results/peft.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from compare import machine
from contestants.adapters import CPU, CPU_QUICK, RANK, peft_contestants
from harness import fork_server  # benchmarks/ on sys.path: run as a script
from harness.race import add_ratios, race

OUT = Path(__file__).resolve().parent / "results" / "peft.json"
PEERS = ["lightning", "lightning_peft", "lightning_peft_compile", "runner_full"]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny model, eager backend, few steps (plumbing check)")
    p.add_argument("--backend", default=None, help="torch.compile backend (default: inductor; --quick: eager)")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--turn", type=int, default=None, help="timed steps per contestant per round")
    p.add_argument("--copies", type=int, default=None, help="processes per contestant, taking the rounds in turn")
    p.add_argument("--rank", type=int, default=RANK, help="every adapter's rank (alpha: twice it)")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    a.backend = a.backend or ("eager" if a.quick else "inductor")
    a.warmup = a.warmup or (2 if a.quick else 3)
    a.rounds = a.rounds or (2 if a.quick else 8)
    a.turn = a.turn or (2 if a.quick else 5)
    a.copies = a.copies or 1
    return a


def tokens_per_s(fig: dict[str, Any], tokens: int) -> float:
    return tokens / (fig["median_ms"] / 1e3)


def targets(figs: dict[str, Any]) -> list[str]:
    """The issue's three targets, each with what the race measured."""
    lora, full = figs["runner_lora"], figs["runner_full"]
    x_full = 1 / lora["ratio"]["runner_full"]
    x_peft = 1 / lora["ratio"]["lightning_peft_compile"]
    state = lora["measured"]["optimizer_state_bytes"] / full["measured"]["optimizer_state_bytes"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    return [f"runner_lora tokens/s = {x_full:.3f}x runner_full's (target >= 1.25x): {verdict(x_full >= 1.25)}",
            f"runner_lora tokens/s = {x_peft:.3f}x lightning_peft_compile's (target >= 1.0x): {verdict(x_peft >= 1.0)}",
            f"runner_lora optimizer state = {100 * state:.2f}% of runner_full's (target <= 2%; it is the trainable "
            f"share, set by the rank and the width alone): {verdict(state <= 0.02)}"]


def table(figs: dict[str, Any], tokens: int) -> str:
    head = ["contestant", "median ms", "tokens/s", "compile s", *[f"vs {p}" for p in PEERS], "graph breaks",
            "recompiles", "peak GiB", "optimizer state MiB", "trainable params", "eval loss"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f in figs.values():
        m = f["measured"]
        cells = [f["label"], f"{f['median_ms']:.1f}", f"{tokens_per_s(f, tokens):,.0f}", f"{f['compile_s']:.1f}",
                 *[f"{f['ratio'][p]:.3f}" for p in PEERS], str(m["graph_breaks"]), str(m["recompiles"]),
                 f"{m['peak_gib']:.2f}", f"{m['optimizer_state_bytes'] / 2**20:.2f}", f"{m['trainable_params']:,}",
                 f"{f['eval_loss']:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(result: dict[str, Any]) -> str:
    m, a = result["machine"], result["args"]
    out = [f"# LoRA and QLoRA ({m['cpu']}, {m['cores']} cores, load average {m['load_avg'][0]:.1f} at start, "
           f"torch {m['torch']}, lightning {m['lightning']}, backend {a['backend']}, {m['date']})\n",
           f"{result['describe']}; {a['rounds']} rounds x {a['turn']} timed steps per contestant after "
           f"{a['warmup']} warm-up steps, fp32; ratios: median over rounds of per-round median step-time ratios "
           "(< 1: faster than the peer)\n", table(result["contestants"], result["tokens_per_step"]), "",
           *[f"- {t}" for t in result["targets"]]]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    size = CPU_QUICK if a.quick else CPU
    ctx = fork_server.start()
    with tempfile.TemporaryDirectory(prefix="runner-bench-") as scratch:
        os.environ["TMPDIR"] = tempfile.tempdir = scratch
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
        try:
            figs = race(ctx, "llama_peft", a.quick, peft_contestants(a.backend, a.rank), a.warmup, a.rounds,
                        a.turn, a.copies)
        finally:
            tempfile.tempdir = None
            os.environ.pop("TMPDIR", None)
    add_ratios(figs, PEERS)
    result: dict[str, Any] = {"machine": machine(), "method": __doc__, "describe": size.describe(a.rank),
                              "args": {k: str(v) for k, v in vars(a).items()}, "tokens_per_step": size.seq * size.batch,
                              "contestants": figs}
    result["targets"] = targets(figs)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(report(result) + f"\nwrote {a.out}")
    print("done", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
