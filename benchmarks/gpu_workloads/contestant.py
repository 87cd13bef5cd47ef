"""The GPT workloads' jobs (``train_job``: one contestant; ``peak``: the device's dense matmul rate for MFU)
and what every workload's jobs share (``BenchModule``, ``Marks``, ``bench_trainer``), run in ``gpu_workloads/child.py``.

Every GPT contestant runs the same code path (``BenchModule``, one ``Trainer`` call, the ``Marks`` and
``HostBusy`` callbacks); ``setup`` returns the one thing that differs: the compile call in the module, the AdamW
implementation and the strategy. A contestant with CUDA graphs also counts, as Inductor partitions each
graph it compiles, how many partitions it made CUDA graphs of and why not the rest (runner's stack counts its
own; the benchmark counts the Lightning peer's the same way).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, cast

import lightning as L
import torch
from contestants.compare import _adamw  # benchmarks/ on sys.path (run as a script): compare.py's AdamW hyper-parameters
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gpu_workloads.gpt import Model
from runner.models.gpt import GPT
from runner.stack.cudagraphs import PartitionCount
from runner.telemetry.throughput import estimate_flops, trainable_parameters
from runner.torch_internals import observation, settings
from runner.training.module import TrainModule, lm_loss


class BenchModule(TrainModule):
    """Every contestant's module (of every workload); ``compile_kwargs`` compiles the model in ``setup`` (as
    the lightning-hydra-template does). The loss is logged without ``prog_bar``: Lightning would turn it
    into a Python float after every batch, a host sync per step."""

    model: nn.Module

    def __init__(self, compile_kwargs: dict[str, Any] | None, **kw: Any) -> None:
        super().__init__(**kw)
        self.compile_kwargs = compile_kwargs

    def setup(self, stage: str) -> None:
        if self.compile_kwargs is not None and stage == "fit":
            self.model = cast(nn.Module, torch.compile(self.model, **self.compile_kwargs))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = lm_loss(self.model(x), y)
        self.log("train/loss", loss)
        return loss


class Marks(Callback):
    """Wall-clock marks at the start of training and at the end of the given steps, the device synchronised
    at the marks only (no per-step sync), and at each mark the compile events so far (torch's compile
    callbacks, through runner's door to torch internals): ``graphs`` (CUDA-graph recordings), ``compiles``
    (every other compile: frames, their recompiles, deferred backwards) and ``recompiles`` (Dynamo compiles of
    a frame already compiled: a compile id whose attempt is not 0)."""

    def __init__(self, steps: list[int], device: str) -> None:
        self.at, self.device = set(steps), device
        self.times: dict[int, float] = {}
        self.counts: dict[int, dict[str, int]] = {}
        self.events = {"graphs": 0, "compiles": 0, "recompiles": 0}
        self.step = 0
        self.unregister: Any = None

    def mark(self, step: int) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
        self.times[step] = time.perf_counter()
        self.counts[step] = dict(self.events)

    def _count(self, trigger: str, compile_id: str) -> None:
        if trigger == observation.CUDAGRAPH_RECORDING_TRIGGER:
            self.events["graphs"] += 1
            return
        self.events["compiles"] += 1
        attempt = compile_id.rsplit("/", 1)[-1].split("_")[0]
        if trigger == "DYNAMO" and attempt.isdigit() and int(attempt) > 0:
            self.events["recompiles"] += 1

    def on_train_start(self, *args: Any) -> None:
        self.unregister = observation.COMPILE_EVENT_SOURCE.subscribe(self._count)
        self.mark(0)

    def on_train_batch_end(self, *args: Any) -> None:
        self.step += 1
        if self.step in self.at:
            self.mark(self.step)

    def on_train_end(self, *args: Any) -> None:
        self.unregister()

    def between(self, first: int, last: int, kind: str) -> int:
        """Events of ``kind`` after mark ``first`` up to mark ``last``."""
        return self.counts[last][kind] - self.counts[first][kind]


def runner_best_settings(device_type: str) -> dict[str, Any]:
    """``CompileStrategy`` arguments runner picks for speed on this device. runner has no speed preset
    (no recipe or config node says "fastest": conf/ and runner/config/schema/ checked), so the choice
    lives here, once: on CUDA the step compiled (the default scope) with CUDA graphs, which remove the
    per-kernel launch cost that dominates small steps; elsewhere CUDA graphs do not exist: the defaults."""
    from runner.config.schema import CudaGraphMode, CudaGraphsConfig

    if device_type == "cuda":
        return {"cudagraphs": CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead)}
    return {}


PEER_GRAPHS = {"lightning_compile_reduce_overhead": "on: torch.compile(mode='reduce-overhead')"}
"""The Lightning peers that record CUDA graphs, with their ``cudagraphs/decision`` (runner's rows carry their own)."""


class HostBusy(Callback):
    """``perf/host_ms_per_step`` and ``perf/device_busy`` for every contestant, Lightning's included, measured as
    runner's telemetry measures them (``runner.telemetry.device_busy.HostDevice``): the host time of the compiled
    steps from ``compiled_from`` on that were not waited for (the device is synchronised only at the marks, after
    this callback's end), and one profiled window of steps from ``start_after`` on (after the timed steps, so the
    profiler's cost stays out of ``step_ms``). Nothing off CUDA."""

    def __init__(self, device: str, compiled_from: int, start_after: int) -> None:
        from runner.telemetry.device_busy import HostDevice, NoHostDevice

        self.compiled_from = compiled_from
        self.meter = HostDevice(torch.device(device), start_after=start_after) if device == "cuda" else NoHostDevice()
        self._t = 0.0

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        step = trainer.global_step
        self.meter.step_start(step, "compiled" if step >= self.compiled_from else "warmup")
        self._t = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        ms = 1e3 * (time.perf_counter() - self._t)
        self.meter.step_end(ms, timed=False, compiled=trainer.global_step - 1 >= self.compiled_from)

    def on_train_end(self, *args: Any) -> None:
        self.meter.close()

    def figures(self) -> dict[str, Any]:

        got = self.meter.figures()
        return {"host_ms_per_step": got.get("perf/host_ms_per_step"), "device_busy": got.get("perf/device_busy")}


def contestant(name: str, device: str, backend: str,
               **runner: Any) -> tuple[dict[str, Any] | None, dict[str, Any], Any]:
    """What differs between contestants, for every workload: (compile kwargs for the module's model, AdamW
    kwargs, strategy). The Lightning peers by name (``lightning``; ``lightning_compile`` or
    ``lightning_compile_fused``, fused AdamW either way; ``lightning_compile_reduce_overhead``); any other name
    is runner's ``CompileStrategy`` with ``runner`` (its config nodes; ``compile`` given the backend)."""
    from runner.config.schema import CompileConfig
    from runner.strategy import CompileStrategy

    compiled = {"backend": backend}
    peers: dict[str, tuple[dict[str, Any] | None, dict[str, Any]]] = {
        "lightning": (None, {}), "lightning_compile": (compiled, {"fused": True}),
        "lightning_compile_fused": (compiled, {"fused": True}),
        "lightning_compile_reduce_overhead": ({**compiled, "mode": "reduce-overhead"}, {"fused": True})}
    if name in peers:
        return *peers[name], "auto"
    compile_cfg = runner.pop("compile", None) or CompileConfig()
    compile_cfg.backend = backend
    return None, {}, CompileStrategy(compile=compile_cfg, device=device, **runner)


def setup(name: str, device: str, backend: str) -> tuple[dict[str, Any] | None, dict[str, Any], Any]:
    """A GPT contestant's (compile kwargs, AdamW kwargs, strategy): ``contestant`` with the runner settings
    its name stands for."""
    from runner.config.schema import Background, CompileConfig, CudaGraphMode, CudaGraphsConfig, OptimizerPolicy

    graphs = {"cudagraphs": CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead)}
    extra = {"runner_step": {}, "runner_best": runner_best_settings(device), "runner_cudagraphs": graphs,
             "runner_cudagraphs_disabled": {"cudagraphs": CudaGraphsConfig(mode=CudaGraphMode.disabled)},
             "runner_graphed": graphs}.get(name, {})
    optimizer = OptimizerPolicy.graphed if name == "runner_graphed" else OptimizerPolicy.auto
    # Background.disabled for every runner contestant: the step compiles in the run, as torch.compile does,
    # so the warm-up holds the compile and every timed step is a compiled one (``auto`` trains eagerly beside
    # a compile process until it is ready: what hf_varlen and cold_start measure, not a step time).
    return contestant(name, device, backend, compile=CompileConfig(background=Background.disabled,
                                                                   optimizer=optimizer), **extra)


BUSY_STEPS = 6
"""Steps after the timed ones: the device-busy window (``HostDevice``'s 5) and the step before it."""


def train(name: str, m: Model, device: str, backend: str) -> dict[str, Any]:
    """Train ``m.warmup + m.timed`` steps as contestant ``name``, then ``BUSY_STEPS`` for the device-busy window;
    its figures."""
    compile_kwargs, adamw, strategy = setup(name, device, backend)
    torch.manual_seed(0)
    model = GPT(vocab_size=256, n_layer=m.n_layer, n_head=m.n_head, n_embd=m.n_embd, block_size=m.seq)
    tokens = m.batch * m.seq
    # 6 x parameters x tokens, plus causal attention's QK^T and AV: 12 x layers x width x seq per token (PaLM).
    flops = estimate_flops(trainable_parameters(model), None, tokens) or 0.0
    flops += 12.0 * m.n_layer * m.n_embd * m.seq * tokens
    end = m.warmup + m.timed
    ids = torch.randint(0, 256, (m.batch * (end + BUSY_STEPS), m.seq + 1), generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=m.batch, pin_memory=device == "cuda")
    marks = Marks([m.warmup, end], device)
    busy = HostBusy(device, compiled_from=m.warmup, start_after=end + 1)
    partitions, observing = PartitionCount(), settings.TorchSettings()
    if device == "cuda" and name in PEER_GRAPHS:  # what each compiled graph put in CUDA graphs, as Inductor decides
        partitions.install(observing)
    trainer = bench_trainer(device, strategy, end + BUSY_STEPS, [busy, marks])  # busy's step end before the marks'
    try:
        trainer.fit(BenchModule(compile_kwargs, model=model, optimizer=_adamw(**adamw)), loader)
    finally:
        observing.restore()
    # runner's own report (the stack counts its partitions itself); empty where no graph was partitioned here
    ran: dict[str, Any] = strategy.figures() if hasattr(strategy, "figures") else partitions.figures()
    decision = ran.get("cudagraphs/decision", PEER_GRAPHS.get(name) if device == "cuda" else None)
    graphs = bool(decision and decision.startswith("on"))
    start, warm = marks.times[0], marks.times[m.warmup]
    step_s = (marks.times[end] - warm) / m.timed
    return {"step_ms": 1e3 * step_s, "tokens_per_step": tokens, "flops_per_step": flops, "warmup_s": warm - start,
            "compile_s": max(0.0, warm - start - m.warmup * step_s),
            "compiles_after_warmup": marks.between(m.warmup, end, "compiles"),
            "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
            "cudagraph_recordings_after_warmup": marks.between(m.warmup, end, "graphs") if graphs else None,
            "cudagraph_partitions": ran.get("cudagraphs/partitions"),
            "cudagraph_partitions_graphed": ran.get("cudagraphs/partitions_graphed"),
            "cudagraph_eager_reasons": ran.get("cudagraphs/eager_reasons"), "cudagraphs_decision": decision,
            "optimizer": ran.get("compile/optimizer"),
            "optimizer_recordings": ran.get("cudagraphs/optimizer_recordings"),
            **busy.figures(),
            "device": device_name(device),
            # The GPU machine has no Hydra: whatever the contestants import must not need it.
            "hydra_modules": sorted(mod for mod in ("hydra", "omegaconf") if mod in sys.modules)}


def bench_trainer(device: str, strategy: Any, max_steps: int, callbacks: list[Callback]) -> L.Trainer:
    """Every workload's ``Trainer``: bf16-mixed on a GPU, fp32 on the CPU (CPUs mostly emulate bf16), no
    validation, progress bar, logger or checkpoint."""
    return L.Trainer(accelerator=device, devices=1, strategy=strategy, max_steps=max_steps,
                     precision="bf16-mixed" if device == "cuda" else "32-true", limit_val_batches=0,
                     num_sanity_val_steps=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, callbacks=callbacks)


def device_name(device: str) -> str:
    """The device in words, as every row names it."""
    return torch.cuda.get_device_name() if device == "cuda" else f"cpu ({os.cpu_count()} cores)"


def peak(device: str) -> dict[str, Any]:
    """The device's dense matmul peak in the run's dtype (runner's MFU probe)."""
    from runner.telemetry.peak import measure_tflops

    if device == "cuda":
        return {"tflops": measure_tflops(torch.device("cuda"), torch.bfloat16, budget_s=3.0), "source": "bf16 probe"}
    return {"tflops": measure_tflops(torch.device("cpu"), torch.float32, budget_s=0.2, max_n=1024),
            "source": "fp32 probe"}


def train_job(name: str, size: dict[str, Any], device: str, backend: str) -> dict[str, Any]:
    """One GPT contestant (a job of ``gpu_workloads.gpt``): ``size`` is a ``Model`` as a dict."""
    return train(name, Model(**size), device, backend)
