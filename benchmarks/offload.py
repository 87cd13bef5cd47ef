"""Saved-activation strategies on the quickstart GPT, compiled (Inductor) and eager, in one process.

    .venv/bin/python benchmarks/offload.py            # 50 steps per variant
    .venv/bin/python benchmarks/offload.py --quick    # 10 steps, eager + aot_eager: a smoke run

Model: ``GPT()`` defaults (4 layers, n_embd 128, block_size 256); batch 16 x 256 bytes of real text
(the Python standard library's own source files). Every variant starts from the same weights and
sees the same batches. Per mode (compiled, eager) and strategy it reports:

- saved-activation bytes after forward+loss on the first batch (``runner.stack.offload.measure``'s
  definition: bytes the step leaves allocated, as stored) and the reduction vs ``none``;
- the gradient's relative error vs ``none`` on that batch;
- the median step time (forward, loss, backward, AdamW) over the training steps, the variants run
  interleaved (round robin, order rotating each step) so machine drift hits all alike, and its
  ratio to ``none``;
- the loss curve over the steps and its largest absolute deviation from ``none``'s curve;
- the first step's time (compiles forward and backward), which is where compile cost shows.

Prints a markdown table; writes ``benchmarks/results/offload.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sysconfig
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from runner.config.schema import OffloadConfig, OffloadStrategy
from runner.models.gpt import GPT
from runner.stack.offload import build_offload
from runner.stack.offload.component import OffloadComponent
from runner.stack.offload.measure import _fresh_code, _measured_path, flat_grads, rel_error, saved_bytes_meter

Batch = tuple[torch.Tensor, torch.Tensor]
VARIANTS: list[tuple[str, OffloadConfig]] = [
    ("none", OffloadConfig(strategy=OffloadStrategy.none)),
    ("bf16", OffloadConfig(strategy=OffloadStrategy.bf16)),
    ("fp8", OffloadConfig(strategy=OffloadStrategy.fp8)),
    ("checkpoint", OffloadConfig(strategy=OffloadStrategy.checkpoint)),
    ("budget_0.5", OffloadConfig(strategy=OffloadStrategy.checkpoint, memory_budget=0.5)),
]


def text_batches(n: int, batch: int, seq: int, seed: int = 0) -> list[Batch]:
    """``n`` batches of (input, next-byte target) windows from the stdlib's Python sources."""
    data = bytearray()
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        data += path.read_bytes()
        if len(data) > 4_000_000:
            break
    tokens = torch.frombuffer(data, dtype=torch.uint8).long()  # bytearray: writable, no warning
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        starts = torch.randint(0, len(tokens) - seq - 1, (batch,), generator=g)
        window = torch.stack([tokens[s : s + seq + 1] for s in starts.tolist()])
        out.append((window[:, :-1].contiguous(), window[:, 1:].contiguous()))
    return out


def loss_of(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return F.cross_entropy(model(b[0]).flatten(0, 1), b[1].flatten())


@dataclass
class Variant:
    """One strategy in one mode: its model copy, component, step function and optimizer."""

    name: str
    cfg: OffloadConfig
    model: torch.nn.Module
    comp: OffloadComponent
    step_fn: Callable[[Batch], torch.Tensor]
    opt: torch.optim.Optimizer
    figures: dict[str, Any] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def step(self, b: Batch, train: bool = True) -> tuple[float, float]:
        """One step (forward+loss in the strategy's context, backward, AdamW): (seconds, loss)."""
        t0 = time.perf_counter()
        with self.comp.step_context():
            loss = self.step_fn(self.comp.prepare_batch(b))
        if loss.requires_grad:  # step_backward mode: backward already ran inside the compiled step
            loss.backward()
        if train:
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0, float(loss.detach())


def build(name: str, cfg: OffloadConfig, base: torch.nn.Module, backend: str | None, check: Batch,
          with_backward: bool = False) -> Variant:
    model = copy.deepcopy(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comp = build_offload(cfg, torch.device("cpu"))
    comp.configure()
    try:
        comp.apply(model)

        def step(b: Batch) -> torch.Tensor:
            return loss_of(model, b)

        def step_and_backward(b: Batch) -> torch.Tensor:
            loss = loss_of(model, b)
            loss.backward()
            return loss.detach()

        chosen = step_and_backward if with_backward else step
        fn = torch.compile(_fresh_code(chosen), backend=backend) if backend else chosen
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
        v = Variant(name, cfg, model, comp, fn, opt)
        # First step on the check batch compiles forward and backward (within the configured
        # memory budget, which is read at compile time); no optimizer step.
        v.figures["first_step_s"] = v.step(check, train=False)[0]
        model.zero_grad(set_to_none=True)
        with saved_bytes_meter(torch.device("cpu")) as meter, comp.step_context():
            loss = fn(check)
        if loss.requires_grad:
            loss.backward()
        v.figures["saved_bytes"] = meter.bytes
        v.figures["grads"] = flat_grads(model)
        model.zero_grad(set_to_none=True)
        return v
    finally:
        comp.teardown()


def run_mode(mode: str, backend: str | None, base: torch.nn.Module, batches: list[Batch],
             with_backward: bool = False, names: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    check, train = batches[0], batches[1:]
    variants = []
    for name, cfg in VARIANTS:
        if names is not None and name not in names:
            continue
        torch.manual_seed(0)
        variants.append(build(name, cfg, base, backend, check, with_backward))
        print(f"  [{mode}] {name}: first step {variants[-1].figures['first_step_s']:.1f} s", flush=True)
    for i, b in enumerate(train):
        k = i % len(variants)
        for v in variants[k:] + variants[:k]:  # rotate the order: no variant always runs first
            seconds, loss = v.step(b)
            v.times.append(seconds)
            v.losses.append(loss)
    ref = variants[0]
    rows = []
    for v in variants:
        reduction = ref.figures["saved_bytes"] / max(1, v.figures["saved_bytes"])
        rows.append({
            # the same rule as a run's measurement: a strategy that packs nothing reports path none
            "mode": mode, "strategy": v.name, "path": _measured_path(v.comp.current_path(), reduction),
            "saved_mib": v.figures["saved_bytes"] / 2**20,
            "reduction_x": reduction,
            "step_ms": 1e3 * statistics.median(v.times),
            "step_ratio": statistics.median(v.times) / statistics.median(ref.times),
            "grad_rel_error": rel_error(v.figures["grads"], ref.figures["grads"]),
            "max_loss_dev": max((abs(a - b) for a, b in zip(v.losses, ref.losses, strict=True)), default=0.0),
            "first_step_s": v.figures["first_step_s"],
            "losses": v.losses,
        })
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| mode | strategy | path | saved MiB | reduction | step ms | step vs none | grad rel. err "
            "| max loss dev (steps) | first step s |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['strategy']} | {r['path']} | {r['saved_mib']:.1f} | {r['reduction_x']:.2f}x "
            f"| {r['step_ms']:.0f} | {r['step_ratio']:.2f}x | {r['grad_rel_error']:.1e} "
            f"| {r['max_loss_dev']:.1e} ({len(r['losses'])}) | {r['first_step_s']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50, help="training steps per variant (after the check step)")
    parser.add_argument("--quick", action="store_true", help="10 steps, aot_eager instead of Inductor")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend of the compiled mode")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "offload.json"))
    args = parser.parse_args()
    steps = 10 if args.quick else args.steps
    backend = "aot_eager" if args.quick else args.backend
    torch.manual_seed(0)
    base = GPT()
    batches = text_batches(steps + 1, batch=16, seq=base.block_size)
    t0 = time.time()
    rows: list[dict[str, Any]] = []
    for mode, be in ((f"compiled ({backend})", backend), ("eager", None)):
        torch.compiler.reset()
        rows += run_mode(mode, be, base, batches)
    # compile.scope=step_backward: forward, loss and backward in one graph (trace_autograd_ops)
    torch.compiler.reset()
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        rows += run_mode(f"step_backward ({backend})", backend, base, batches, with_backward=True,
                         names=("none", "bf16"))
    print()
    print(table(rows))
    if not torch.cuda.is_available():
        print("\noffload.strategy=cpu is not run: on a CPU device it is a warned no-op (acts as none).")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"torch": torch.__version__, "python": platform.python_version(), "steps": steps,
            "backend": backend, "batch": [16, base.block_size], "threads": torch.get_num_threads(),
            "wall_s": time.time() - t0}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {out} ({meta['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
