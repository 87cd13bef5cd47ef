"""Large vocabularies on the CPU: the loss from the whole logits against runner's chunked loss, side by side.

    .venv/bin/python benchmarks/vocab.py            # full run: 32,000, 128,256 and 256,000 ids, Inductor (~10 min)
    .venv/bin/python benchmarks/vocab.py --quick    # tiny model and vocabularies, Dynamo's eager backend (the test's)

A Llama-style model (``contestants/vocab.py``: llama_tiny's width, two layers, 4,096 positions a step) with each
vocabulary, fine-tuned in full and with LoRA. Per vocabulary and method, compare.py's race (``harness.race.race``): each
contestant (eager Lightning first, Lightning + ``torch.compile``, runner with ``loss.chunked=false``, runner with its
default ``loss.chunked=auto``) trains its own copy (same seed, same batches) in its own process, warm-up alone (its
compile), then interleaved rounds of timed steps; each ratio is the median over rounds of the per-round ratio of
median steps. Beside the step: the timed steps' peak resident set (``VmHWM``, reset at the first timed step: the
compile is not in it), the whole process's, graph breaks, recompiles, the eval loss of the trained copy.

Then the largest batch under a fixed memory cap (``--cap-gib``, 4 GiB) at 128,256 ids, in full: Lightning + compile and
runner's chunked loss, each in a process of its own on batches of 1, 2, 4, 8 and 16 rows of 1,024 positions, each
size's peak resident set measured, until a size passes the cap (``contestants.vocab.ladder``).

Targets (issue 76), at 128,256 ids: runner_chunked's step peak <= 0.4x lightning_compile's at <= 1.10x its step
time; at least 2x its batch under the same cap; at 32,000, runner_chunked (auto) never slower than runner_whole.
Prints markdown tables; writes ``benchmarks/results/vocab.json`` (``--out``; none with ``--quick`` unless given).
Timings on a shared machine are noisy: the ratios are measured side by side in one run; the peaks are not timing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any

from compare import machine
from contestants.vocab import CONFIGS, DEFAULT, LABELS, QUICK_CONFIGS, Config, ladder, size_of, vocab_contestants
from harness import fork_server  # benchmarks/ on sys.path: run as a script
from harness.race import add_ratios, race

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "vocab.json"
PEERS = ["lightning", "lightning_compile", "runner_whole"]
LADDER = [1, 2, 4, 8, 16]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny model and vocabularies, eager backend (plumbing)")
    p.add_argument("--backend", default=None, help="torch.compile backend (default: inductor; --quick: eager)")
    p.add_argument("--configs", nargs="+", default=None, help="VOCAB_METHOD (128256_lora); default: "
                   + " ".join(CONFIGS))
    p.add_argument("--contestants", nargs="+", choices=list(LABELS), default=list(DEFAULT))
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--turn", type=int, default=None, help="timed steps per contestant per round")
    p.add_argument("--cap-gib", type=float, default=None, help="the memory cap of the largest-batch search")
    p.add_argument("--ladder-vocab", type=int, default=None, help="the vocabulary of the largest-batch search")
    p.add_argument("--no-ladder", action="store_true", help="skip the largest-batch search")
    p.add_argument("--out", type=Path, default=None,
                   help=f"default: {OUT.relative_to(HERE.parent)} (none with --quick)")
    a = p.parse_args(argv)
    a.backend = a.backend or ("eager" if a.quick else "inductor")
    a.configs = [Config.parse(f"vocab_{c}") for c in a.configs or (QUICK_CONFIGS if a.quick else CONFIGS)]
    a.warmup = a.warmup or (2 if a.quick else 1)
    a.rounds = a.rounds or (1 if a.quick else 2)
    a.turn = a.turn or (2 if a.quick else 1)
    a.cap_gib = a.cap_gib or (1.5 if a.quick else 4.0)
    a.ladder_vocab = a.ladder_vocab or (a.configs[-1].vocab if a.quick else 128_256)
    a.ladder_contestants = ["lightning_compile", "runner_chunked"]
    a.out = a.out or (None if a.quick else OUT)
    return a


def _ladder_process(env: dict[str, str], name: str, config: Config, a: dict[str, Any], conn: Any) -> None:
    fork_server.adopt(env)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    try:
        conn.send(ladder(name, config, a["quick"], a["backend"], a["sizes"], a["cap_gib"]))
    except BaseException:
        conn.send({"contestant": name, "config": config.name, "error": traceback.format_exc()[-2000:]})


def run_ladder(ctx: Any, name: str, config: Config, a: argparse.Namespace) -> dict[str, Any]:
    """``contestants.vocab.ladder`` in a process of its own (from the fork server, as the race's contestants)."""
    here, child = ctx.Pipe()
    sizes = [1, 2, 4] if a.quick else LADDER
    args = {"quick": a.quick, "backend": a.backend, "sizes": sizes, "cap_gib": a.cap_gib}
    proc = ctx.Process(target=_ladder_process, args=(dict(os.environ), name, config, args, child), name=name)
    proc.start()
    try:
        return here.recv()  # type: ignore[no-any-return]
    finally:
        proc.join()


def step_rows(figs: dict[str, Any], config: Config, quick: bool) -> list[str]:
    """The race's rows of one vocabulary and method, as table lines."""
    size = size_of(config, quick)
    tokens = size.seq * size.batch
    lines = []
    for name, f in figs.items():
        m = f.get("measured") or {}
        ratio = [f"{f['ratio'][p]:.3f}" if p in f["ratio"] else "-" for p in PEERS]
        chunked = "chunked: " + str(m.get("loss/chunks")) if m.get("loss/chunked") else "whole"
        lines.append(f"| {config.vocab:,} | {config.method} | {size.seq} x {size.batch} | {name} | "
                     f"{f['median_ms']:,.0f} | {tokens / (f['median_ms'] / 1e3):,.0f} | "
                     f"{m.get('step_peak_gib', 0):.2f} | "
                     f"{m.get('peak_gib', 0):.2f} | {' | '.join(ratio)} | {m.get('graph_breaks')} | "
                     f"{m.get('recompiles')} | {chunked} | {f['eval_loss']:.4f} |")
    return lines


STEP_HEAD = ("| vocabulary | method | seq x batch | contestant | step ms | tokens/s | step peak GiB | "
             + "process peak GiB | " + " | ".join(f"vs {p}" for p in PEERS)
             + " | graph breaks | recompiles | loss | eval loss |\n"
             + "|---:|---|---|---|---:|---:|---:|---:|" + "---:|" * len(PEERS) + "---:|---:|---|---:|")
LADDER_HEAD = "| contestant | largest batch under the cap | peak GiB per batch |\n|---|---:|---|"


def ladder_line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"| {row['contestant']} | error | {row['error'].strip().splitlines()[-1]} |"
    peaks = ", ".join(f"{b}: {p:.2f}" for b, p in row["peaks_gib"].items())
    skipped = "".join(f", {b}: predicted {p:.1f} (not run)" for b, p in row["skipped_predicted_gib"].items())
    return f"| {row['contestant']} | {row['largest_batch']} | {peaks}{skipped} |"


def targets(result: dict[str, Any]) -> list[str]:
    """The issue's targets, each with what was measured."""
    out = []
    races = result["races"]
    vocab = result["args"]["ladder_vocab"]
    for method in ("full", "lora"):
        big = races.get(f"vocab_{vocab}_{method}")
        if not big or not {"runner_chunked", "lightning_compile"} <= set(big):
            continue
        rc, lc = big["runner_chunked"], big["lightning_compile"]
        mem = rc["measured"]["step_peak_gib"] / lc["measured"]["step_peak_gib"]
        time = rc["ratio"]["lightning_compile"]
        out.append(f"{vocab:,} ids, {method}: runner_chunked step peak = {mem:.2f}x lightning_compile's (target "
                   f"<= 0.4x: {'met' if mem <= 0.4 else 'MISSED'}), step time = {time:.3f}x (target <= 1.10x: "
                   f"{'met' if time <= 1.10 else 'MISSED'})")
    lad = {r["contestant"]: r for r in result.get("ladder", []) if "error" not in r}
    if {"runner_chunked", "lightning_compile"} <= set(lad):
        a, b = lad["runner_chunked"]["largest_batch"] or 0, lad["lightning_compile"]["largest_batch"] or 0
        capped = " (the largest batch tried)" if a == max(LADDER) else ""
        out.append(f"largest batch under {result['args']['cap_gib']} GiB: runner_chunked {a}{capped}, "
                   f"lightning_compile {b} (target >= 2x: {'met' if b and a >= 2 * b else 'MISSED'})")
    for method in ("full", "lora"):
        small = races.get(f"vocab_32000_{method}")
        if small and {"runner_chunked", "runner_whole"} <= set(small):
            x = small["runner_chunked"]["ratio"]["runner_whole"]
            chunked = small["runner_chunked"]["measured"].get("loss/chunked")
            out.append(f"32,000 ids, {method}: runner auto ({'chunked' if chunked else 'whole logits'}) step time = "
                       f"{x:.3f}x runner_whole's (target <= 1.0x, never slower: {'met' if x <= 1.0 else 'MISSED'})")
    return out


def report(result: dict[str, Any]) -> str:
    m, a = result["machine"], result["args"]
    lines = [f"# Large vocabularies ({m['cpu']}, {m['cores']} cores, load average {m['load_avg'][0]:.1f} at start, "
             f"torch {m['torch']}, lightning {m['lightning']}, backend {a['backend']}, {m['date']})", "",
             f"{result['describe']}; {a['rounds']} rounds x {a['turn']} timed steps per contestant after "
             f"{a['warmup']} warm-up steps, fp32; ratios: median over rounds of per-round median step-time ratios "
             "(< 1: faster than the peer)", "", STEP_HEAD]
    for name, figs in result["races"].items():
        lines += step_rows(figs, Config.parse(name), a["quick"])
    if result.get("ladder"):
        lines += ["", f"Largest batch (rows of {result['seq']} positions) under {a['cap_gib']} GiB, "
                  f"{a['ladder_vocab']:,} ids, full fine-tune:", "", LADDER_HEAD,
                  *[ladder_line(r) for r in result["ladder"]]]
    return "\n".join([*lines, "", *[f"- {t}" for t in result["targets"]]]) + "\n"


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    configs = a.configs
    ctx = fork_server.start()
    races: dict[str, Any] = {}
    ladders: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="runner-bench-") as scratch:
        os.environ["TMPDIR"] = tempfile.tempdir = scratch
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
        try:
            for config in configs:
                field = vocab_contestants(a.backend, a.quick, a.warmup, a.contestants)
                figs = race(ctx, config.name, a.quick, field, a.warmup, a.rounds, a.turn)
                add_ratios(figs, [p for p in PEERS if p in figs])
                races[config.name] = figs
                print("\n".join([STEP_HEAD, *step_rows(figs, config, a.quick)]), file=sys.stderr, flush=True)
            if not a.no_ladder:
                for name in [c for c in a.ladder_contestants if c in a.contestants]:
                    ladders.append(run_ladder(ctx, name, Config(a.ladder_vocab, "full"), a))
                    print(ladder_line(ladders[-1]), file=sys.stderr, flush=True)
        finally:
            tempfile.tempdir = None
            os.environ.pop("TMPDIR", None)
    given = argv if argv is not None else sys.argv[1:]
    size = size_of(Config(a.ladder_vocab, "full"), a.quick)
    result: dict[str, Any] = {"machine": machine(), "method": __doc__, "command": " ".join(
        ["python", "benchmarks/vocab.py", *given]), "describe": (
        f"Llama-style {size.layers}x{size.hidden} (MLP {size.intermediate}, {size.heads} heads, untied output layer); "
        "LoRA: r=16, alpha=32 on every attention and MLP linear"),
        "args": {k: (str(v) if isinstance(v, Path) else [c.name for c in v] if k == "configs" else v)
                 for k, v in vars(a).items()},
        "seq": size.seq, "races": races, "ladder": ladders}
    result["targets"] = targets(result)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result) + (f"\nwrote {a.out}" if a.out else ""))


if __name__ == "__main__":
    main()
