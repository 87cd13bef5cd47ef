"""The contestants of ``vocab.py`` (CPU) and of ``gpu.py``'s ``vocab`` workload: a Llama-style model with a large
vocabulary fine-tuned in full or with LoRA, its loss from the whole logits or chunked.

- ``lightning``: eager Lightning, the loss from the whole logits (the baseline every ratio starts from);
- ``lightning_compile``: Lightning + ``torch.compile(module)`` + fused AdamW, the whole logits (what users write);
- ``runner_whole``: runner's ``CompileStrategy`` (compile.scope=step, optimizer=auto), ``loss.chunked=false``;
- ``runner_chunked``: the same with runner's default, ``loss.chunked=auto`` (chunked at these sizes).

LoRA: HF peft's ``get_peft_model`` in the Lightning contestants (what their users run), ``runner.peft`` in runner's;
rank 16 on every attention and MLP linear, the output layer frozen. Each contestant leaves in ``c.extra["measured"]``
what ``vocab.py`` reports beside its step time: the peak resident set of its timed steps (``VmHWM`` reset at the
first timed step, so the compile is not in it) and of its whole process, graph breaks and recompiles, and runner's
``loss/*`` decision.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from contestants.adapters import Size, causal_lm, hf_peft, measured, runner_peft
from contestants.compare import Contestant, Pacer, PeerModule, _adamw, _fit  # benchmarks/ on sys.path: run as a script
from contestants.workload import Workload
from runner.config.schema import Background, CompileConfig, OptimizerPolicy, Scope
from runner.config.schema.loss import LossConfig
from runner.config.schema.peft import PeftConfig, PeftMethod
from runner.strategy import CompileStrategy
from runner.training.loss import resolve_loss
from runner.training.module import TrainModule

CPU = Size(hidden=128, intermediate=344, layers=1, heads=4, seq=1024, batch=4)
"""llama_tiny's width (runner's recipe), one layer (its compile is most of a contestant's fixed cost), 4,096 positions
a step: the logits dominate, as the issue's measurement at 128,256 ids found (4.4 of 5.26 GB)."""
CPU_QUICK = Size(hidden=32, intermediate=64, layers=1, heads=2, seq=64, batch=2)
SHAPES = {32_000: (2048, 2), 128_256: (1024, 4), 256_000: (1024, 2)}
"""(seq, batch) per vocabulary: 4,096 positions a step at 32,000 ids (the logits of 2 chunks: what auto does there) and
128,256 (the issue's measurement), 2,048 at 256,000 (its eager steps take longest)."""
CONFIGS = ("32000_full", "128256_full", "128256_lora", "256000_lora")
"""Llama 2's, Llama 3's and Gemma's vocabularies; Llama 3's in full and with LoRA."""
QUICK_CONFIGS = ("4096_full", "4096_lora")
METHODS = ("full", "lora")

LABELS = {
    "lightning": "Lightning eager, whole logits",
    "lightning_compile": "Lightning + torch.compile(module) + fused AdamW, whole logits",
    "runner_whole": "runner CompileStrategy, loss.chunked=false",
    "runner_chunked": "runner CompileStrategy, loss.chunked=auto (the default)",
    "runner_chunks16": "runner CompileStrategy, loss.chunks=16 (chunks half auto's size: the memory it buys, the time)",
}
DEFAULT = ["lightning", "lightning_compile", "runner_whole", "runner_chunked"]
"""The contestants a run races unless told (``runner_chunks16`` is asked for by name)."""


@dataclass(frozen=True)
class Config:
    """One row group: a vocabulary and a way of fine-tuning."""

    vocab: int
    method: str

    @property
    def name(self) -> str:
        return f"vocab_{self.vocab}_{self.method}"

    @staticmethod
    def parse(name: str) -> Config:
        _, vocab, method = name.split("_")
        return Config(int(vocab), method)


def size_of(config: Config, quick: bool) -> Size:
    if quick:
        return replace(CPU_QUICK, vocab=config.vocab)
    seq, batch = SHAPES.get(config.vocab, (CPU.seq, CPU.batch))
    return replace(CPU, vocab=config.vocab, seq=seq, batch=batch)


def vocab_workload(name: str, quick: bool) -> Workload:
    """The model of ``name`` (``vocab_<ids>_<full|lora>``) on windows of the stdlib source (byte ids, every
    contestant the same batches)."""
    from runner.data.text import TextDataModule

    size = size_of(Config.parse(name), quick)
    dm = TextDataModule(seq_len=size.seq, batch_size=size.batch, max_bytes=20_000 if quick else 2_000_000)
    dm.setup("fit")
    return Workload(name, size.describe(), partial(causal_lm, size), dm.train_dataloader().dataset, size.batch)


def vm_hwm_gib() -> float:
    """The process's peak resident set since the last reset (``VmHWM``), GiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 2**20


def reset_vm_hwm() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class StepPeak(Callback):
    """The peak resident set of the steps from ``first`` on (the timed ones: the compile is before them)."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.peak_gib: float | None = None
        self.before_gib = 0.0
        """The peak before the reset (the compile's): resetting ``VmHWM`` resets ``getrusage``'s peak too."""

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.first:
            self.before_gib = vm_hwm_gib()
            reset_vm_hwm()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.peak_gib = round(vm_hwm_gib(), 3)

    def process_gib(self) -> float:
        """The whole process's peak: before the timed steps and during them."""
        return round(max(self.before_gib, self.peak_gib or 0.0), 3)


def build(name: str, config: Config, size: Size, backend: str, seed: int = 0) -> tuple[Any, Any]:
    """Contestant ``name``'s LightningModule and strategy (``"auto"``: Lightning's own)."""
    torch.manual_seed(seed)
    model = causal_lm(size)
    lora = config.method == "lora"
    if name.startswith("lightning"):
        if lora:
            model = hf_peft(model)
        compiled = name == "lightning_compile"
        module = PeerModule(model, optimizer=_adamw(**({"fused": True} if compiled else {})))
        return (torch.compile(module, backend=backend) if compiled else module), "auto"
    # --quick's logits are too small for auto to chunk them: the plumbing chunks anyway, 4 chunks a step.
    loss = LossConfig(chunked=False) if name == "runner_whole" else LossConfig(chunked=True, chunks=16) \
        if name == "runner_chunks16" else LossConfig(chunked=True, chunks=4) if size.seq == CPU_QUICK.seq \
        else LossConfig()
    peft = PeftConfig(method=PeftMethod.lora if lora else PeftMethod.none, r=16, alpha=32)
    plan = resolve_loss(model, loss, peft, {"batch_size": size.batch, "seq_len": size.seq}, None)
    if lora:
        model = runner_peft(model, PeftMethod.lora)
    module = TrainModule(model, optimizer=_adamw(), loss=plan)
    cfg = CompileConfig(scope=Scope.step, backend=backend, optimizer=OptimizerPolicy.auto,
                        background=Background.disabled)
    return module, CompileStrategy(compile=cfg, device="cpu")


def run_contestant(c: Contestant, work: Workload, steps: int, pacer: Pacer) -> None:
    """Train as contestant ``c.name`` (module docstring) under the race's pacer; what it held in ``c.extra``."""
    from runner.torch_internals import observation

    observation.keep_compilation_metrics(10_000)
    config = Config.parse(work.name)
    module, strategy = build(c.name, config, size_of(config, c.extra["quick"]), c.extra["backend"])
    inner = getattr(module, "_orig_mod", module)
    c.model = inner.model
    peak = StepPeak(c.extra["warmup"])
    before = observation.counters_snapshot()
    _fit(module, work, steps, pacer, strategy=strategy, callbacks=[peak])
    plan = getattr(inner, "loss_plan", None)
    c.extra["measured"] = {**measured(inner, inner.trainer.optimizers, before), "step_peak_gib": peak.peak_gib,
                           "peak_gib": peak.process_gib(),
                           **({k: v for k, v in plan.figures().items()} if plan is not None else {})}


def vocab_contestants(backend: str, quick: bool, warmup: int, names: list[str] | None = None) -> list[Contestant]:
    """The field (``names``, else ``DEFAULT``), eager Lightning first (the baseline)."""
    extra = {"backend": backend, "quick": quick, "warmup": warmup}
    return [Contestant(n, LABELS[n], run_contestant, dict(extra)) for n in LABELS if n in (names or DEFAULT)]


# -- the largest batch under a memory cap ----------------------------------------------------------------------
class LadderSampler(torch.utils.data.Sampler[list[int]]):
    """Batches of growing size: ``steps`` of each size in ``sizes``, in order, the dataset's rows in turn."""

    def __init__(self, rows: int, sizes: list[int], steps: int) -> None:
        self.rows, self.sizes, self.steps = rows, sizes, steps

    def __iter__(self) -> Any:
        start = 0
        for size in self.sizes:
            for _ in range(self.steps):
                yield [(start + i) % self.rows for i in range(size)]
                start += size

    def __len__(self) -> int:
        return len(self.sizes) * self.steps


class LadderPeak(Callback):
    """Each batch size's peak resident set (``VmHWM`` reset at its first step: a size's first step may compile, and
    that memory counts). The fit stops after a size above ``cap_gib``, or before a size that a line through the last
    two sizes' peaks puts above 1.5 x the cap (the machine is shared: no size is run that would need far more)."""

    def __init__(self, sizes: list[int], steps: int, cap_gib: float) -> None:
        self.sizes, self.steps, self.cap = sizes, steps, cap_gib
        self.peaks: dict[int, float] = {}
        self.skipped: dict[int, float] = {}

    def _size(self, step: int) -> int:
        return self.sizes[step // self.steps]

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step % self.steps == 0:
            reset_vm_hwm()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step  # after this batch's optimizer step
        if step % self.steps:
            return
        size = self._size(step - 1)
        self.peaks[size] = round(vm_hwm_gib(), 3)
        at = self.sizes.index(size)
        if self.peaks[size] > self.cap or at + 1 == len(self.sizes):
            trainer.should_stop = True
            return
        if at >= 1:
            (b1, p1), (b2, p2) = [(b, self.peaks[b]) for b in self.sizes[at - 1:at + 1]]
            nxt = self.sizes[at + 1]
            predicted = p2 + (p2 - p1) / (b2 - b1) * (nxt - b2)
            if predicted > 1.5 * self.cap:
                self.skipped[nxt] = round(predicted, 3)
                trainer.should_stop = True

    def largest(self) -> int | None:
        """The largest batch whose peak stayed within the cap."""
        fits = [b for b, p in self.peaks.items() if p <= self.cap]
        return max(fits) if fits else None


def ladder(name: str, config: Config, quick: bool, backend: str, sizes: list[int], cap_gib: float,
           steps: int = 2) -> dict[str, Any]:
    """Contestant ``name`` on batches of growing ``sizes`` (``steps`` each) until its peak passes ``cap_gib``."""
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader

    work = vocab_workload(config.name, quick)
    module, strategy = build(name, config, size_of(config, quick), backend)
    peak = LadderPeak(sizes, steps, cap_gib)
    loader = DataLoader(work.dataset, batch_sampler=LadderSampler(len(work.dataset), sizes, steps))  # type: ignore[arg-type]
    import tempfile

    trainer = L.Trainer(accelerator="cpu", devices=1, strategy=strategy, max_steps=len(sizes) * steps,
                        limit_val_batches=0, num_sanity_val_steps=0, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False,
                        logger=CSVLogger(tempfile.mkdtemp(prefix="bench-csv-")), callbacks=[peak])
    trainer.fit(module, loader)
    return {"contestant": name, "config": config.name, "cap_gib": cap_gib, "peaks_gib": peak.peaks,
            "skipped_predicted_gib": peak.skipped, "largest_batch": peak.largest()}
