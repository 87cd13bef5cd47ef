"""LoRA-DPO with runner against TRL's ``DPOTrainer`` + peft, on the CPU: the same model, pairs and settings.

    .venv/bin/python benchmarks/dpo.py --trl-python TRL_VENV/bin/python   # full run, Inductor
    .venv/bin/python benchmarks/dpo.py --quick                             # tiny model, eager backend (the test's)

TRL runs in a virtual environment of its own (``--trl-python``; make it with ``python -m venv TRL_VENV &&
TRL_VENV/bin/pip install trl peft torch==<runner's torch>``), so neither tool's packages are the other's. Each
contestant is its own process (``contestants/dpo.py``, started by its tool's Python), eager TRL first:

- ``trl_defaults``: ``DPOTrainer`` + peft ``LoraConfig`` (the reference: the policy with its adapter disabled), eager,
  with TRL's own gradient checkpointing (its default; its bfloat16 and lr 1e-6 are set to runner's, below);
- ``trl``: the same without gradient checkpointing (TRL at its fastest eager setting);
- ``trl_compile``: the same, compiled: the model compiled in place (``nn.Module.compile``) before peft wraps it
  (TRL 1.13.0's own ``torch_compile=True`` crashed with peft at the first step, its reference branch calling
  ``ref_model``, None, for a compiled model: the benchmark runs that too, one step, and records what it did);
- ``runner_padded_eager``: runner, ``objective=dpo peft=lora``, pairs padded per batch as TRL's are, nothing compiled
  (``compile.scope=none``: what a CPU run whose compile is not ready trains);
- ``runner_padded``: the same, ``compile.scope=step``, ``optimizer=auto``;
- ``runner_packed``: the same on packed pairs (rows of ``2 x seq_len``: one batch shape).

The same model (a Llama-style model built from its configuration, same seed), the same pairs
(``examples/data/preference.jsonl``: runner's training split, the prompt in runner's template), a byte-level BPE
tokenizer trained on them, the same adapter (rank 16, alpha 32, every attention and MLP linear, no dropout), beta
0.1, AdamW (lr 1e-3, weight decay 0.1, constant), float32; TRL's defaults that differ (bfloat16, lr 1e-6; gradient
checkpointing, but in ``trl_defaults``) are set to these, which makes TRL faster on this CPU, not slower.

``harness/race.py``'s method: warm-up alone (where each compiles), then interleaved rounds of timed steps, reversed
every other round; pairs/s is pairs per step over the median step, and each ratio the median over rounds of the
per-round ratio. Beside it: peak memory (resident set), graphs, recompiles (and those after warm-up), graph breaks.
Targets: runner LoRA-DPO >= 1.3x TRL's best in pairs/s, 0 recompiles after warm-up (issue 78); runner's padded
pairs, compiled and eager, at least TRL's speed with its defaults, and eager at least TRL's eager (issue 85). Prints
a markdown table; writes ``benchmarks/results/dpo.json`` (``--out``). The issue's race:
``--layers 4 --seq-len 256`` (``--only trl,runner_padded_eager`` races two).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from compare import machine  # sibling modules: run as a script
from harness.race import add_ratios, race

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "dpo.json"
PAIRS = ROOT / "examples" / "data" / "preference.jsonl"
TRL_PYTHON = os.environ.get("RUNNER_TRL_PYTHON", str(Path.home() / ".cache" / "runner" / "trl-venv" / "bin" / "python"))
CPU = {"hidden": 512, "intermediate": 1408, "layers": 2, "heads": 8}
PEERS = ("trl_defaults", "trl", "trl_compile")
"""TRL's contestants, the ratios' denominators: its defaults (gradient checkpointing), then at runner's settings."""
CPU_QUICK = {"hidden": 32, "intermediate": 64, "layers": 1, "heads": 2}


class Contestant:
    """One contestant of the race: its name, its label, and the spec its program runs."""

    def __init__(self, name: str, label: str, spec: dict[str, Any]) -> None:
        self.name, self.label, self.spec = name, label, spec


class Child:
    """The driver's handle on one contestant program (what ``race._Remote`` is for a forked one)."""

    def __init__(self, c: Contestant, total: int) -> None:
        self.name = c.name
        spec = {**c.spec, "steps": total}
        python = spec.pop("python")
        self.proc = subprocess.Popen([python, str(HERE / "contestants" / "dpo.py"), json.dumps(spec)], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.result: dict[str, Any] | None = None
        self._expect("done")  # built, waiting at its first step

    def _expect(self, kind: str) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"contestant {self.name} exited ({self.proc.wait()}) without a word: see its stderr")
        message = json.loads(line)
        if message["kind"] == "error":
            raise RuntimeError(f"contestant {self.name} failed:\n{message['payload']}")
        if message["kind"] == "result":
            self.result = message["payload"]
        elif message["kind"] != kind:
            raise RuntimeError(f"contestant {self.name}: expected {kind}, got {message['kind']}")

    def turn(self, steps: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        self._expect("done")

    def finish(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{10**9}\n")
        self.proc.stdin.flush()
        while self.result is None:
            self._expect("done")
        self.proc.wait()
        return self.result

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny model, eager backend, few steps (plumbing check)")
    p.add_argument("--trl-python", default=TRL_PYTHON, help="the Python of TRL's virtual environment")
    p.add_argument("--backend", default=None, help="torch.compile backend (default: inductor; --quick: eager)")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--turn", type=int, default=None, help="timed steps per contestant per round")
    p.add_argument("--batch", type=int, default=None, help="pairs a step (TRL, runner_padded)")
    p.add_argument("--seq-len", type=int, default=128, help="the longest sequence (prompt + one completion)")
    p.add_argument("--layers", type=int, default=None, help="decoder layers (default: 2; --quick: 1)")
    p.add_argument("--only", default=None, help="comma-separated contestants to race (default: all)")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    a.backend = a.backend or ("eager" if a.quick else "inductor")
    a.warmup = a.warmup or (2 if a.quick else 4)
    a.rounds = a.rounds or (2 if a.quick else 8)
    a.turn = a.turn or (2 if a.quick else 5)
    a.batch = a.batch or (2 if a.quick else 8)
    a.size = {**(CPU_QUICK if a.quick else CPU), **({"layers": a.layers} if a.layers else {})}
    return a


def tokenizer(directory: Path) -> int:
    """A byte-level BPE tokenizer trained on the pairs' text (pad 0, EOS 1), saved in ``directory``; its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rows = [json.loads(line) for line in PAIRS.read_text().splitlines()]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([r[k] for r in rows for k in ("prompt", "chosen", "rejected")], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(directory)
    return len(fast)


def field(a: argparse.Namespace, scratch: Path, trl: bool) -> list[Contestant]:
    """The contestants, eager TRL first, each with the spec its program reads."""
    from runner.data.instruct.formats import PAIR_TEMPLATE
    from runner.data.splits import split_documents

    rows = len(PAIRS.read_text().splitlines())
    directory = scratch / "tokenizer"
    base = {"pairs": str(PAIRS), "tokenizer": str(directory), "vocab": tokenizer(directory),
            "size": a.size, "seq_len": a.seq_len, "batch": a.batch, "rank": 16,
            "beta": 0.1, "lr": 1e-3, "weight_decay": 0.1, "seed": 0, "backend": a.backend, "warmup": a.warmup,
            "template": PAIR_TEMPLATE, "rows": [int(i) for i in split_documents(rows, 0.1, 0).train],
            "scratch": str(scratch)}
    out = []
    if trl:
        trl_base = {**base, "python": a.trl_python, "tool": "trl"}
        out += [Contestant("trl_defaults", "TRL DPOTrainer + peft, eager, its gradient checkpointing",
                           {**trl_base, "compile": "", "gradient_checkpointing": True}),
                Contestant("trl", "TRL DPOTrainer + peft, eager", {**trl_base, "compile": ""}),
                Contestant("trl_compile", "TRL DPOTrainer + peft, the model compiled in place",
                           {**trl_base, "compile": "in_place"})]
    runner = {**base, "python": sys.executable, "tool": "runner", "rows": []}
    out += [Contestant("runner_padded_eager", "runner objective=dpo peft=lora, pairs padded per batch, eager",
                       {**runner, "packing": False, "scope": "none"}),
            Contestant("runner_padded", "runner objective=dpo peft=lora, pairs padded per batch",
                       {**runner, "packing": False}),
            Contestant("runner_packed", "runner objective=dpo peft=lora, packed pairs",
                       {**runner, "packing": True, "rows_per_batch": max(1, a.batch // 2)})]
    if a.only:
        names = a.only.split(",")
        unknown = set(names) - {c.name for c in out}
        if unknown:
            raise SystemExit(f"--only: no contestant {sorted(unknown)}; the contestants: {[c.name for c in out]}")
        out = [c for c in out if c.name in names]
    return out


def pairs_per_s(f: dict[str, Any]) -> float:
    return f["measured"]["pairs_per_step"] / (f["median_ms"] / 1e3)


def add_pair_ratios(figs: dict[str, Any], peers: list[str]) -> None:
    """Each contestant's pairs/s against each peer's: the median over rounds of the per-round ratio."""
    for f in figs.values():
        f["pairs_per_s"] = pairs_per_s(f)
        f["pairs_ratio"] = {
            p: statistics.median(
                (f["measured"]["pairs_per_step"] / a) / (figs[p]["measured"]["pairs_per_step"] / b)
                for a, b in zip(f["round_medians_ms"], figs[p]["round_medians_ms"], strict=True))
            for p in peers if p in figs}


def targets(figs: dict[str, Any]) -> list[str]:
    """Issue 78's targets (runner >= 1.3x TRL's best, 0 recompiles after warm-up) and issue 85's (padded pairs at
    least TRL's speed with its defaults; runner's eager step at least TRL's eager step), each with what was measured."""
    peers = [p for p in PEERS if p in figs]
    if not peers:
        return ["TRL was not raced (no --trl-python): the pairs/s target is unmeasured"]
    best = max(peers, key=lambda p: figs[p]["pairs_per_s"])
    out = []
    for name in ("runner_packed", "runner_padded"):
        if name not in figs:
            continue
        x = figs[name]["pairs_ratio"][best]
        out.append(f"{name} pairs/s = {x:.3f}x {best}'s, TRL's best (target >= 1.3x): "
                   f"{'met' if x >= 1.3 else 'MISSED'}")
        after = figs[name]["measured"]["recompiles_after_warmup"]
        out.append(f"{name} recompiles after warm-up: {after} (target 0): {'met' if after == 0 else 'MISSED'}")
    for name, peer in (("runner_padded", "trl_defaults"), ("runner_padded_eager", "trl_defaults"),
                       ("runner_padded_eager", "trl")):
        if name in figs and peer in figs:
            x = figs[name]["pairs_ratio"][peer]
            out.append(f"{name} pairs/s = {x:.3f}x {peer}'s (target >= 1.0x): {'met' if x >= 1.0 else 'MISSED'}")
    return out


def table(figs: dict[str, Any], peers: list[str]) -> str:
    head = ["contestant", "median step ms", "pairs/step", "pairs/s", *[f"pairs/s vs {p}" for p in peers],
            "compile s", "graphs", "recompiles", "after warm-up", "graph breaks", "peak GiB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f in figs.values():
        m = f["measured"]
        cells = [f["label"], f"{f['median_ms']:.1f}", f"{m['pairs_per_step']:.2f}", f"{f['pairs_per_s']:.1f}",
                 *[f"{f['pairs_ratio'][p]:.3f}x" for p in peers], f"{f['compile_s']:.1f}", str(m["graphs"]),
                 str(m["recompiles"]), str(m["recompiles_after_warmup"]), str(m["graph_breaks"]),
                 f"{m['peak_gib']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(result: dict[str, Any]) -> str:
    m, a = result["machine"], result["args"]
    out = [f"# LoRA-DPO: runner against TRL ({m['cpu']}, {m['cores']} cores, load average {m['load_avg'][0]:.1f} at "
           f"start, torch {m['torch']}, trl {result['trl']}, backend {a['backend']}, {m['date']})\n",
           f"{result['describe']}; {a['rounds']} rounds x {a['turn']} timed steps per contestant after {a['warmup']} "
           "warm-up steps; ratios: median over rounds of per-round pairs/s ratios (> 1: more pairs a second)\n",
           table(result["contestants"], result["peers"]), "", *[f"- {t}" for t in result["targets"]]]
    if result.get("trl_torch_compile"):
        out.append(f"- TRL's own torch_compile=True with peft, one step: {result['trl_torch_compile']}")
    return "\n".join(out) + "\n"


def trl_torch_compile(spec: dict[str, Any]) -> str:
    """What TRL's own ``torch_compile=True`` does with peft: one step, alone, Dynamo's eager backend; ``"trains"``,
    or the last line of its error."""
    spec = {**spec, "compile": "trainer", "backend": "eager", "steps": 1, "warmup": 0, "alone": True}
    python = spec.pop("python")
    done = subprocess.run([python, str(HERE / "contestants" / "dpo.py"), json.dumps(spec)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if lines and lines[-1]["kind"] == "result":
        return "trains"
    error = lines[-1]["payload"] if lines else done.stderr
    return "fails: " + error.strip().splitlines()[-1]


def trl_version(python: str) -> str | None:
    """The TRL version ``python`` imports, None when it imports none."""
    try:
        done = subprocess.run([python, "-c", "import trl; print(trl.__version__)"], capture_output=True, text=True,
                              timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    version = trl_version(a.trl_python)
    if version is None:
        print(f"no TRL at --trl-python={a.trl_python}: racing runner's contestants only", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="runner-bench-dpo-") as scratch:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-", dir=scratch)
        contestants = field(a, Path(scratch), trl=version is not None)
        trl_spec = next((c.spec for c in contestants if c.name == "trl"), None)
        torch_compile = trl_torch_compile(trl_spec) if trl_spec is not None and not a.only else None
        figs = race(None, "dpo", a.quick, contestants, a.warmup, a.rounds, a.turn,  # type: ignore[arg-type]
                    start=lambda c, total: Child(c, total))
    peers = [p for p in PEERS if p in figs]
    add_ratios(figs, peers)
    add_pair_ratios(figs, peers)
    size = a.size
    describe = (f"Llama-style {size['layers']}x{size['hidden']} (MLP {size['intermediate']}, {size['heads']} heads, "
                f"BPE vocabulary {contestants[0].spec['vocab']}), seq_len {a.seq_len}, {a.batch} pairs a step "
                f"(runner_packed: {max(1, a.batch // 2)} rows of {2 * a.seq_len}), adapter r=16, alpha=32, beta 0.1")
    result: dict[str, Any] = {"machine": machine(), "method": __doc__, "describe": describe, "trl": version,
                              "trl_torch_compile": torch_compile,
                              "args": {k: str(v) for k, v in vars(a).items()}, "peers": peers, "contestants": figs}
    result["targets"] = targets(figs)
    text = report(result)
    print(text)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
