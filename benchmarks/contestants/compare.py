"""The contestants of ``compare.py``: one training loop per tool, each in its own thread.

Every contestant builds its own model copy from the same seed (``contestants/workloads.py``), its own DataLoader over
the same dataset with the same shuffling seed (so the same batches in the same order) and the same AdamW
hyper-parameters, and trains for the same number of steps, each in its own process. Each calls
``Pacer.tick()`` at the start of every step: the tick records the time since the previous tick (one
whole step: data fetch, forward, backward, optimizer, framework hooks and logging) and, when the
contestant's turn is over, blocks until the driver hands it the next turn. Only one contestant runs
at a time, so they never compete for the two cores; the time spent waiting is never inside a
measured step.

Processes, not threads: torch's CPU kernels run on OpenMP (libgomp), which keeps one thread team per
calling thread and, once a process holds more OpenMP threads than cores, stops spinning between
parallel regions (sleep and wake for each one). Contestants as threads of one process measured 2.2-2.5x
slower steps on this 2-core machine (25 -> 58 ms for the many-parameter MLP), penalising most the
loops with the most small kernels.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader

from contestants.pacer import Pacer  # benchmarks/ on sys.path: run as a script
from contestants.workload import Workload  # benchmarks/ on sys.path: run as a script
from runner.config.schema import Background, CompileConfig, OptimizerPolicy, Scope
from runner.strategy import CompileStrategy
from runner.training.module import TrainModule, lm_loss

LR, WEIGHT_DECAY = 1e-3, 0.1


class _Tick(Callback):
    def __init__(self, pacer: Pacer) -> None:
        self.pacer = pacer

    def on_train_batch_start(self, *args: Any) -> None:
        self.pacer.tick()


class PeerModule(TrainModule):
    """What a Lightning user writes: the loss logged from ``on_train_batch_end``, since ``self.log``
    inside a ``training_step`` compiled by ``torch.compile(module)`` crashes Dynamo (torch 2.13)."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return lm_loss(self.model(x), y)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.log("train/loss", outputs["loss"], prog_bar=True)


@dataclass
class Contestant:
    """One tool's training loop. ``run`` is the thread body; ``model`` is set once it is built."""

    name: str
    label: str
    run: Callable[[Contestant, Workload, int, Pacer], None]
    extra: dict[str, Any] = field(default_factory=dict)
    model: nn.Module | None = None


def _adamw(**kw: Any) -> Callable[..., torch.optim.Optimizer]:
    return partial(torch.optim.AdamW, lr=LR, weight_decay=WEIGHT_DECAY, **kw)


def _fit(module: L.LightningModule, work: Workload, steps: int, pacer: Pacer, strategy: Any = "auto",
         precision: str = "32-true", callbacks: list[Callback] | None = None) -> None:
    trainer = L.Trainer(
        accelerator="cpu", devices=1, strategy=strategy, max_steps=steps, limit_val_batches=0,
        num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        logger=CSVLogger(tempfile.mkdtemp(prefix="bench-csv-")), callbacks=[_Tick(pacer), *(callbacks or [])],
        precision=precision,  # type: ignore[arg-type]
    )
    trainer.fit(module, work.loader(seed=0))


def run_lightning(c: Contestant, work: Workload, steps: int, pacer: Pacer) -> None:
    """Eager Lightning: a plain LightningModule, AdamW as constructed by default."""
    module = PeerModule(work.model(seed=0), optimizer=_adamw())
    c.model = module.model
    _fit(module, work, steps, pacer, precision=c.extra.get("precision", "32-true"))


def run_lightning_compile(c: Contestant, work: Workload, steps: int, pacer: Pacer) -> None:
    """Lightning's documented recipe: ``trainer.fit(torch.compile(module))``."""
    module = PeerModule(work.model(seed=0), optimizer=_adamw(**c.extra.get("adamw", {})))
    c.model = module.model
    _fit(torch.compile(module, backend=c.extra["backend"]), work, steps, pacer,  # type: ignore[arg-type]
         precision=c.extra.get("precision", "32-true"))


def run_runner(c: Contestant, work: Workload, steps: int, pacer: Pacer) -> None:
    """runner: ``TrainModule`` (logs inside the step) under ``CompileStrategy``."""
    module = TrainModule(work.model(seed=0), optimizer=_adamw())
    c.model = module.model
    # compile.background=disabled: the races time compiled steps and the first step's compile.
    cfg = CompileConfig(scope=c.extra["scope"], backend=c.extra["backend"], optimizer=OptimizerPolicy.auto,
                        options=dict(c.extra.get("options", {})), background=Background.disabled)
    callbacks = run_callbacks() if c.extra.get("telemetry") else []
    _fit(module, work, steps, pacer, strategy=CompileStrategy(compile=cfg, device="cpu"),
         precision=c.extra.get("precision", "32-true"), callbacks=callbacks)


def run_callbacks() -> list[Callback]:
    """The per-step callbacks ``python -m runner`` adds: telemetry (compile events, step clock,
    throughput, MFU), the non-finite guard, the interrupt handler and the LR monitor. Two things are
    left out, each for a reason: the in-run speedup pairs (``speedup_steps=0``: 20 steps run eagerly
    on purpose, once per run, which a per-step race would count as framework cost) and the peak
    probe (``peak_tflops`` given: a start-up cost, not a per-step one). They come in one ``CallbackGroup``,
    as ``python -m runner`` gives them to Lightning (one dispatch per hook)."""
    from lightning.pytorch.callbacks import LearningRateMonitor

    from runner.config.schema import OnNonFinite, TelemetryConfig
    from runner.lightning_step.callback_group import CallbackGroup
    from runner.reliability.numerics import NonFiniteGuard
    from runner.reliability.signals import GracefulInterrupt
    from runner.telemetry import CompileTelemetry

    scratch = Path(tempfile.mkdtemp(prefix="bench-run-"))
    last = scratch / "last.ckpt"
    telemetry = CompileTelemetry(TelemetryConfig(speedup_steps=0, peak_tflops=1.0), scratch)
    return [CallbackGroup(LearningRateMonitor("step"), telemetry, NonFiniteGuard(OnNonFinite.stop, last),
                          GracefulInterrupt(last))]


def run_hand_loop(c: Contestant, work: Workload, steps: int, pacer: Pacer) -> None:
    """No framework (nanoGPT's loop): forward and loss compiled (AOTAutograd compiles the backward),
    ``loss.backward()``, fused AdamW: what a hand-written loop does. Tracing the backward into the
    same graph as well (``trace_autograd_ops``) measured 17% slower on the GPT here (2026-11-22)."""
    model = work.model(seed=0)
    c.model = model
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2]},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = _adamw(fused=True)(groups)

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return lm_loss(model(x), y)

    compiled = torch.compile(loss_of, backend=c.extra["backend"])
    batches = _forever(work.loader(seed=0))
    for _ in range(steps):
        pacer.tick()
        x, y = next(batches)
        opt.zero_grad(set_to_none=True)
        compiled(x, y).backward()
        opt.step()


def _forever(loader: DataLoader[Any]) -> Iterator[Any]:
    while True:
        yield from loader


def contestants(backend: str, scopes: list[Scope], best: Scope, fused_peer: bool,
                telemetry: bool = True, options: tuple[str, ...] = ()) -> list[Contestant]:
    """The peers, then runner with each compile scope (``best`` is runner's configuration for the
    device), then ``best`` with the callbacks ``python -m runner`` adds (``runner_cli``), then
    ``best`` with each boolean Inductor option in ``options`` on (``runner_step+cpp_wrapper``...)."""
    out = [
        Contestant("lightning", "Lightning eager", run_lightning),
        Contestant("lightning_compile", "Lightning + torch.compile(module)", run_lightning_compile,
                   {"backend": backend}),
    ]
    if fused_peer:
        out.append(Contestant("lightning_compile_fused", "Lightning + torch.compile(module) + fused AdamW",
                              run_lightning_compile, {"backend": backend, "adamw": {"fused": True}}))
    out.append(Contestant("hand_loop", "hand-written loop: compiled forward+loss, fused AdamW", run_hand_loop,
                          {"backend": backend}))
    for scope in scopes:
        star = " (best)" if scope is best else ""
        out.append(Contestant(f"runner_{scope.value}", f"runner scope={scope.value}, optimizer=auto{star}",
                              run_runner, {"backend": backend, "scope": scope}))
    if telemetry:
        out.append(Contestant("runner_cli", f"runner scope={best.value} + telemetry and reliability callbacks",
                              run_runner, {"backend": backend, "scope": best, "telemetry": True}))
    for option in options:
        label = f"runner scope={best.value}, compile.options.{option}=true"
        out.append(Contestant(f"runner_{best.value}+{option}", label, run_runner,
                              {"backend": backend, "scope": best, "options": {option: True}}))
    return out


def bf16_contestants(backend: str, best: Scope) -> list[Contestant]:
    """The bf16-mixed race (GPT): eager Lightning, Lightning + compile and runner, all ``bf16-mixed``."""
    bf16 = {"precision": "bf16-mixed"}
    return [
        Contestant("lightning", "Lightning eager, bf16-mixed", run_lightning, dict(bf16)),
        Contestant("lightning_compile", "Lightning + torch.compile(module), bf16-mixed", run_lightning_compile,
                   {"backend": backend, **bf16}),
        Contestant("lightning_compile_fused", "Lightning + torch.compile(module) + fused AdamW, bf16-mixed",
                   run_lightning_compile, {"backend": backend, "adamw": {"fused": True}, **bf16}),
        Contestant(f"runner_{best.value}", f"runner scope={best.value}, optimizer=auto, bf16-mixed (best)",
                   run_runner, {"backend": backend, "scope": best, **bf16}),
    ]
