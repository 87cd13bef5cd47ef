"""Each model family's recipe model: runner against Lightning + ``torch.compile(model)``, on the same data.

    .venv/bin/python benchmarks/families.py          # llama gpt2 bert (+ resnet18 vit_tiny where timm imports)
    .venv/bin/python benchmarks/families.py --models llama --quick

compare.py's method and contestants (``harness.race.race``: one process per contestant, interleaved rounds, ratios as
the median over rounds of per-round median ratios, the eval loss of every contestant's trained model on one batch):
eager Lightning, Lightning + ``torch.compile(module)`` (without and with fused AdamW), a hand-written loop (compiled
forward+loss, fused AdamW) and runner (``CompileStrategy``, compile.scope=step, optimizer=auto). Workloads:
``contestants/family_workloads.py``. Prints markdown tables; writes ``benchmarks/results/families.json``.
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

from compare import machine  # sibling modules: run as a script
from contestants.compare import contestants
from contestants.family_workloads import FAMILIES, family_workload
from harness import fork_server  # benchmarks/ on sys.path: run as a script
from harness.race import race
from reports.compare import LOSS_RTOL, table

from runner.config.schema import Scope

OUT = Path(__file__).resolve().parent / "results" / "families.json"
BEST = "runner_step"


def timm_imports() -> bool:
    try:
        import timm  # noqa: F401
    except Exception:  # not installed, or its torchvision does not match this torch (docs/vision.md)
        return False
    return True


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", choices=FAMILIES, default=None,
                   help="default: every family whose library imports here")
    p.add_argument("--quick", action="store_true", help="tiny data and batches, few steps (plumbing check)")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--turn", type=int, default=None)
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    if a.models is None:
        a.models = [m for m in FAMILIES if m in ("llama", "gpt2", "bert") or timm_imports()]
    a.warmup = a.warmup or (2 if a.quick else 3)
    a.rounds = a.rounds or (2 if a.quick else 8)
    a.turn = a.turn or (2 if a.quick else 5)
    return a


def verdicts(name: str, figs: dict[str, Any]) -> list[str]:
    """runner against each compiled peer, and every contestant's eval loss against runner's."""
    ratio = figs[BEST]["ratio"]
    out = [f"{name}: {BEST} / {peer} = {ratio[peer]:.3f}" for peer in ("lightning", "lightning_compile",
                                                                       "lightning_compile_fused") if peer in ratio]
    ref = figs[BEST]["eval_loss"]
    worst = max(figs, key=lambda n: abs(figs[n]["eval_loss"] - ref))
    diff = abs(figs[worst]["eval_loss"] - ref) / abs(ref)
    ok = "met" if diff <= LOSS_RTOL else "MISSED"
    out.append(f"{name}: eval loss {ref:.4f}, largest difference {100 * diff:.3f}% ({worst}) "
               f"(target <= {100 * LOSS_RTOL:g}%): {ok}")
    return out


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    result: dict[str, Any] = {"machine": machine(), "method": __doc__, "args": {k: str(v) for k, v in vars(a).items()},
                              "models": {}}
    ctx = fork_server.start()
    with tempfile.TemporaryDirectory(prefix="runner-bench-") as scratch:
        os.environ["TMPDIR"] = tempfile.tempdir = scratch
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
        try:
            for name in a.models:
                work = family_workload(name, a.quick)
                field = contestants(a.backend, [Scope.step], Scope.step, fused_peer=True, telemetry=False)
                figs = race(ctx, name, a.quick, field, a.warmup, a.rounds, a.turn)
                result["models"][name] = {"describe": work.describe, "contestants": figs,
                                          "verdicts": verdicts(name, figs)}
                print(f"{name}: done", file=sys.stderr, flush=True)
        finally:
            tempfile.tempdir = None
            os.environ.pop("TMPDIR", None)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(report(result) + f"\nwrote {a.out}")


def report(result: dict[str, Any]) -> str:
    m, a = result["machine"], result["args"]
    out = [f"# model families ({m['cpu']}, {m['cores']} cores, load average {m['load_avg'][0]:.1f} at start, "
           f"torch {m['torch']}, lightning {m['lightning']}, backend {a['backend']}, {m['date']})\n",
           f"{a['rounds']} rounds x {a['turn']} timed steps per contestant after {a['warmup']} warm-up steps, fp32; "
           "ratios: median over rounds of per-round median ratios (< 1: runner faster)\n"]
    for name, model in result["models"].items():
        out.append(f"## {name}: {model['describe']}\n\n{table(model['contestants'], BEST)}\n")
        out.append("\n".join(f"- {v}" for v in model["verdicts"]) + "\n")
    return "\n".join(out)


if __name__ == "__main__":
    main()
