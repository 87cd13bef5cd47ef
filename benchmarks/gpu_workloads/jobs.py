"""The jobs of the ``memory`` and ``cold_start`` workloads, run in ``gpu_workloads/child.py`` (``hf_varlen``'s is in
``gpu_workloads/hf_job.py``).

Each trains through the same ``BenchModule`` and ``Trainer`` as the GPT contestants; what differs per
contestant is what ``gpu_workloads.contestant.contestant`` returns: the compile call in the module and the AdamW it uses
(the Lightning peers), or the runner strategy.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Iterator
from typing import Any

import torch
from contestants.compare import _adamw
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, IterableDataset

from gpu_workloads.contestant import BenchModule, Marks, bench_trainer, contestant, device_name
from runner.config import schema as cs


# -- memory ---------------------------------------------------------------------------------------------------
class Batches(IterableDataset):  # type: ignore[type-arg]
    """Random token windows, one batch per entry of ``schedule`` (its batch size): the batch grows mid-fit."""

    def __init__(self, schedule: list[int], seq: int, vocab: int) -> None:
        self.schedule, self.seq, self.vocab = schedule, seq, vocab

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(0)
        for b in self.schedule:
            ids = torch.randint(0, self.vocab, (b, self.seq + 1), generator=g)
            yield ids[:, :-1], ids[:, 1:]


class StepMemory(Callback):
    """Each step's time (the device synchronised at its end) and, on CUDA, its peak allocated bytes."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.steps: list[tuple[float, int | None]] = []
        self._t = 0.0

    def on_train_batch_start(self, *args: Any) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self._t = time.perf_counter()

    def on_train_batch_end(self, *args: Any) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        self.steps.append((time.perf_counter() - self._t, torch.cuda.max_memory_allocated() if self.cuda else None))


def largest_batch(b1: int, peak1: float, b2: int, peak2: float, cap: float) -> float | None:
    """The batch at which the line through two (batch, peak bytes) points reaches ``cap`` (activations
    grow linearly with the batch; weights, gradients and optimizer state do not). None where it does not grow."""
    slope = (peak2 - peak1) / (b2 - b1)
    return None if slope <= 0 else b2 + (cap - peak2) / slope


def out_of_memory(error: BaseException | None) -> bool:
    """Whether ``error`` or an error it wraps (a compile error that hit it, say) is CUDA running out of memory."""
    while error is not None:
        if isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower():
            return True
        error = error.__cause__ or error.__context__
    return False


MEMORY_STRATEGIES = {"runner_none": (cs.OffloadStrategy.none, None), "runner_cpu": (cs.OffloadStrategy.cpu, None),
                     "runner_bf16": (cs.OffloadStrategy.bf16, None), "runner_fp8": (cs.OffloadStrategy.fp8, None),
                     "runner_checkpoint": (cs.OffloadStrategy.checkpoint, None),
                     "runner_checkpoint_budget": (cs.OffloadStrategy.checkpoint, 0.5)}


def memory(name: str, size: dict[str, Any], device: str, backend: str, cap_gib: float) -> dict[str, Any]:
    """A Llama-style LM at a long sequence: the peak and step time at batch ``size["batches"][1]`` (its later
    steps in a first fit that also ran ``size["batches"][0]``), the largest batch under ``cap_gib`` predicted
    from the two peaks, then a second fit at that batch under the cap (``set_per_process_memory_fraction``),
    stepping down a tenth after an out-of-memory error, for its tokens/s. On the CPU, with no cap, the second
    fit runs at the larger probe batch."""
    from runner.models.hf import CausalLM

    seq, (b1, b2), (warm, timed) = size["seq"], size["batches"], size["steps"]
    torch.manual_seed(0)
    model = CausalLM(config="llama", overrides={**size["llama"], "max_position_embeddings": seq})
    runner: dict[str, Any] = {}
    if name in MEMORY_STRATEGIES:  # every strategy at scope=blocks: one compiled block serves every layer
        strategy, budget = MEMORY_STRATEGIES[name]
        # Compiled in the run (compile.background=disabled): a compile process beside it would hold device memory
        # of its own while the peaks are measured.
        runner = {"compile": cs.CompileConfig(scope=cs.Scope.blocks, background=cs.Background.disabled),
                  "offload": cs.OffloadConfig(strategy=strategy, memory_budget=budget, measure=False)}

    def fit(schedule: list[int]) -> StepMemory:
        compile_kwargs, adamw, strategy = contestant(name, device, backend, **dict(runner))
        steps = StepMemory(device)
        data = DataLoader(Batches(schedule, seq, size["llama"]["vocab_size"]), batch_size=None)
        bench_trainer(device, strategy, len(schedule), [steps]).fit(
            BenchModule(compile_kwargs, model=model, optimizer=_adamw(**adamw)), data)
        release()
        return steps

    def release() -> None:
        # The fit's optimizer state and gradients go before the next fit allocates its own.
        model.zero_grad(set_to_none=True)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()

    probe = fit([b1] * (warm + 1) + [b2] * (warm + timed))  # the first step of each size compiles
    at_b1, at_b2 = probe.steps[1:warm + 1], probe.steps[2 * warm + 1:]
    out: dict[str, Any] = {"ref_batch": b2, "step_ms": 1e3 * statistics.median(t for t, _ in at_b2),
                           "peak_gib": None, "predicted_batch": None, "cap_gib": None, "tries": []}
    batch = b2
    if device == "cuda":
        peak1, peak2 = max(m or 0 for _, m in at_b1), max(m or 0 for _, m in at_b2)
        cap = cap_gib * 2**30
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / torch.cuda.get_device_properties(0).total_memory))
        predicted = largest_batch(b1, peak1, b2, peak2, cap)
        out |= {"peak_gib": peak2 / 2**30, "predicted_batch": predicted, "cap_gib": cap_gib}
        batch = int(predicted or 0)
    while batch >= b1:
        try:
            run = fit([batch] * (warm + timed))
        except Exception as e:
            if not out_of_memory(e):
                raise
            failed = True
        else:
            failed = False
        if failed:  # here, not in the except block: the error's traceback (and the fit it holds) is gone
            release()
            out["tries"].append([batch, "out of memory"])
            batch -= max(1, batch // 10)
            continue
        timed_s = sum(t for t, _ in run.steps[warm:])
        out["tries"].append([batch, "fits"])
        out |= {"run_batch": batch, "max_batch": batch if device == "cuda" else None,
                "tokens_per_s_at_max": batch * seq * timed / timed_s,
                "peak_gib_at_max": max(m or 0 for _, m in run.steps) / 2**30 if device == "cuda" else None}
        break
    return {**out, "device": device_name(device)}


# -- cold_start -----------------------------------------------------------------------------------------------
def first_steps(name: str, size: dict[str, Any], device: str, backend: str, steps: int = 10) -> dict[str, Any]:
    """Seconds from the job's start (the process's imports done: ``startup_s``) to the end of the first and of
    the ``steps``-th trained step, the device synchronised there: building the model and Trainer, compiling
    (from the compile cache the job's environment names) and training."""
    from runner.models.gpt import GPT

    started = time.perf_counter()
    in_run = {"compile": cs.CompileConfig(background=cs.Background.disabled)} if name == "runner_in_run" else {}
    compile_kwargs, adamw, strategy = contestant(name, device, backend, **in_run)
    torch.manual_seed(0)
    model = GPT(vocab_size=256, n_layer=size["n_layer"], n_head=size["n_head"], n_embd=size["n_embd"],
                block_size=size["seq"])
    ids = torch.randint(0, 256, (size["batch"] * steps, size["seq"] + 1), generator=torch.Generator().manual_seed(1))
    loader = DataLoader(torch.utils.data.TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=size["batch"])
    marks = Marks([1, steps], device)
    bench_trainer(device, strategy, steps, [marks]).fit(
        BenchModule(compile_kwargs, model=model, optimizer=_adamw(**adamw)), loader)
    return {"first_step_s": marks.times[1] - started, "tenth_step_s": marks.times[steps] - started,
            "compiles": marks.counts[steps]["compiles"], "device": device_name(device)}

