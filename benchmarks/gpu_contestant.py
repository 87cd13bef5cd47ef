"""One contestant of ``gpu.py`` in its own process: trains one model, writes its figures as JSON.

    python benchmarks/gpu_contestant.py CONTESTANT SIZE_JSON DEVICE BACKEND RESULT_PATH
    python benchmarks/gpu_contestant.py --peak DEVICE RESULT_PATH

Every contestant runs the same code path (``GPTModule``, one ``Trainer`` call, the ``Window``
callback); ``setup`` returns the one thing that differs: the compile call in the module, the AdamW
implementation and the strategy. A contestant with CUDA graphs also counts, as Inductor partitions each
graph it compiles, how many partitions it made CUDA graphs of and why not the rest. ``--peak`` probes the
device's dense matmul rate for MFU.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch
from contestants import _adamw  # sibling modules (run as a script): compare.py's AdamW hyper-parameters
from gpu import Model
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from runner import torch_internals as ti
from runner.figures.cudagraphs import CUDAGRAPHS_EAGER_REASONS, CUDAGRAPHS_PARTITIONS, CUDAGRAPHS_PARTITIONS_GRAPHED
from runner.models.gpt import GPT
from runner.stack.cudagraphs import PartitionCount
from runner.telemetry.throughput import estimate_flops, trainable_parameters
from runner.training.module import TrainModule, lm_loss


class GPTModule(TrainModule):
    """Every contestant's module; ``compile_kwargs`` compiles the model in ``setup`` (as the
    lightning-hydra-template does). The loss is logged without ``prog_bar``: Lightning would turn it
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


class Window(Callback):
    """Wall time of the warm-up steps and of the timed steps after them, with the device synchronised
    at the three marks only; the compiles and CUDA-graph recordings during the timed steps (torch's
    compile callbacks, through runner's door to torch internals)."""

    def __init__(self, warmup: int, timed: int, device: str) -> None:
        self.warmup, self.timed, self.device = warmup, timed, device
        self.marks: list[float] = []
        self.steps = 0
        self.events = {"graphs": 0, "compiles": 0}
        self.at_window = dict(self.events)
        self.unregister: Any = None

    def _mark(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
        self.marks.append(time.perf_counter())

    def _count(self, trigger: str, compile_id: str) -> None:
        self.events["graphs" if trigger == ti.CUDAGRAPH_RECORDING_TRIGGER else "compiles"] += 1

    def on_train_start(self, *args: Any) -> None:
        self.unregister = ti.COMPILE_EVENTS.subscribe(self._count)
        self._mark()

    def on_train_batch_end(self, *args: Any) -> None:
        self.steps += 1
        if self.steps == self.warmup:
            self._mark()
            self.at_window = dict(self.events)
        elif self.steps == self.warmup + self.timed:
            self._mark()

    def on_train_end(self, *args: Any) -> None:
        self.unregister()

    def after_warmup(self, kind: str) -> int:
        """Events of ``kind`` (``graphs`` or ``compiles``) during the timed steps."""
        return self.events[kind] - self.at_window[kind]


def runner_best_settings(device_type: str) -> dict[str, Any]:
    """``CompileStrategy`` arguments runner picks for speed on this device. runner has no speed preset
    (no recipe or config node says "fastest": conf/ and runner/config/schema.py checked), so the choice
    lives here, once: on CUDA the step compiled (the default scope) with CUDA graphs, which remove the
    per-kernel launch cost that dominates small steps; elsewhere CUDA graphs do not exist: the defaults."""
    from runner.config.schema import CudaGraphMode, CudaGraphsConfig

    if device_type == "cuda":
        return {"cudagraphs": CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead)}
    return {}


def uses_graphs(name: str, device_type: str) -> bool:
    """Whether the contestant records CUDA graphs (only ever on a CUDA device)."""
    return device_type == "cuda" and (name in ("lightning_compile_reduce_overhead", "runner_cudagraphs")
                                      or (name == "runner_best" and "cudagraphs" in runner_best_settings("cuda")))


def setup(name: str, device: str, backend: str) -> tuple[dict[str, Any] | None, dict[str, Any], Any]:
    """What differs between contestants: (compile kwargs for the module's model, AdamW kwargs, strategy)."""
    compiled = {"backend": backend}
    peers: dict[str, tuple[dict[str, Any] | None, dict[str, Any]]] = {
        "lightning": (None, {}), "lightning_compile_fused": (compiled, {"fused": True}),
        "lightning_compile_reduce_overhead": ({**compiled, "mode": "reduce-overhead"}, {"fused": True})}
    if name in peers:
        return *peers[name], "auto"
    from runner.config.schema import Background, CompileConfig, CudaGraphMode, CudaGraphsConfig
    from runner.strategy import CompileStrategy

    extra = {"runner_step": {}, "runner_best": runner_best_settings(device),
             "runner_cudagraphs": {"cudagraphs": CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead)}}[name]
    # Background.disabled for every runner contestant: the step compiles in the run, as torch.compile does,
    # so the warm-up holds the compile and every timed step is a compiled one (``auto`` trains eagerly
    # beside a compile process on the CPU and switches when that pays; on CUDA it resolves to disabled).
    cfg = CompileConfig(backend=backend, background=Background.disabled)
    return None, {}, CompileStrategy(compile=cfg, device=device, **extra)


def train(name: str, m: Model, device: str, backend: str) -> dict[str, Any]:
    """Train ``m.warmup + m.timed`` steps as contestant ``name``; its figures."""
    compile_kwargs, adamw, strategy = setup(name, device, backend)
    torch.manual_seed(0)
    model = GPT(vocab_size=256, n_layer=m.n_layer, n_head=m.n_head, n_embd=m.n_embd, block_size=m.seq)
    tokens = m.batch * m.seq
    # 6 x parameters x tokens, plus causal attention's QK^T and AV: 12 x layers x width x seq per token (PaLM).
    flops = estimate_flops(trainable_parameters(model), None, tokens) or 0.0
    flops += 12.0 * m.n_layer * m.n_embd * m.seq * tokens
    ids = torch.randint(0, 256, (m.batch * (m.warmup + m.timed), m.seq + 1), generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=m.batch, pin_memory=device == "cuda")
    window = Window(m.warmup, m.timed, device)
    partitions, observing = PartitionCount(), ti.TorchSettings()
    if uses_graphs(name, device):  # what each compiled graph put in CUDA graphs, seen as Inductor decides it
        partitions.install(observing)
    trainer = L.Trainer(accelerator=device, devices=1, strategy=strategy, max_steps=m.warmup + m.timed,
                        precision="bf16-mixed" if device == "cuda" else "32-true",  # CPUs mostly emulate bf16
                        limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, callbacks=[window])
    try:
        trainer.fit(GPTModule(compile_kwargs, model=model, optimizer=_adamw(**adamw)), loader)
    finally:
        observing.restore()
    counted = partitions.figures()  # empty where no graph was partitioned here (all from the compile cache)
    start, warm, end = window.marks
    step_s = (end - warm) / m.timed
    return {"step_ms": 1e3 * step_s, "tokens_per_step": tokens, "flops_per_step": flops, "warmup_s": warm - start,
            "compile_s": max(0.0, warm - start - m.warmup * step_s),
            "compiles_after_warmup": window.after_warmup("compiles"),
            "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
            "cudagraph_recordings_after_warmup": window.after_warmup("graphs") if uses_graphs(name, device) else None,
            "cudagraph_partitions": counted.get(CUDAGRAPHS_PARTITIONS),
            "cudagraph_partitions_graphed": counted.get(CUDAGRAPHS_PARTITIONS_GRAPHED),
            "cudagraph_eager_reasons": counted.get(CUDAGRAPHS_EAGER_REASONS),
            "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({os.cpu_count()} cores)",
            # The GPU machine has no Hydra: whatever the contestants import must not need it.
            "hydra_modules": sorted(mod for mod in ("hydra", "omegaconf") if mod in sys.modules)}


def peak(device: str) -> dict[str, Any]:
    """The device's dense matmul peak in the run's dtype (runner's MFU probe)."""
    from runner.telemetry.peak import measure_tflops

    if device == "cuda":
        return {"tflops": measure_tflops(torch.device("cuda"), torch.bfloat16, budget_s=3.0), "source": "bf16 probe"}
    return {"tflops": measure_tflops(torch.device("cpu"), torch.float32, budget_s=0.2, max_n=1024),
            "source": "fp32 probe"}


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[0] == "--peak":
        out = peak(args[1])
    else:
        name, size, device, backend = args[:4]
        out = train(name, Model(**json.loads(size)), device, backend)
    Path(args[-1]).write_text(json.dumps(out))
