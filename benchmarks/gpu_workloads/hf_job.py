"""The ``hf_varlen`` job (``gpu_workloads/hf.py``'s workload), run in ``gpu_workloads/child.py``: one contestant
fine-tunes a BERT-shaped classifier through the same ``BenchModule`` and ``Trainer`` as every other workload's
contestants.

``Finish`` marks the batches the row needs (the device synchronised at the marks only) and decides when the
fit ends: at ``batches``, unless a compile beside the run is still pending there (``compile.background``): then
the fit goes on until it has switched and trained ``steady`` batches without compiling (at most ``long``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from contestants.compare import _adamw

from gpu_workloads.contestant import BenchModule, Marks, bench_trainer, contestant, device_name
from runner.config import schema as cs
from runner.data.sequences.padding import PadTo

BUCKETS_OF = (8, 4, 2, 1)
"""The bucket contestants' buckets: the longest length over each of these (512: 64, 128, 256, 512)."""


def runner_nodes(name: str, seq: int, device: str) -> dict[str, Any] | None:
    """Each runner contestant's config nodes (None: a Lightning peer). ``runner_best`` is runner's pick for
    this workload, in one place: static buckets (at most four graphs) and, on CUDA, CUDA graphs, compiling
    beside the run as the default does; ``runner_bucket`` is the same compiling in the run."""
    bucket = cs.DynamicConfig(policy=cs.ShapePolicy.bucket, buckets=[seq // k for k in BUCKETS_OF])
    graphs = {"cudagraphs": cs.CudaGraphsConfig(mode=cs.CudaGraphMode.reduce_overhead)} if device == "cuda" else {}
    in_run = {"compile": cs.CompileConfig(background=cs.Background.disabled)}
    return {"runner_defaults": {"dynamic": cs.DynamicConfig()},
            "runner_best": {"dynamic": bucket, **graphs},
            "runner_bucket": {"dynamic": bucket, **graphs, **in_run},
            "runner_dynamic": {"dynamic": cs.DynamicConfig(policy=cs.ShapePolicy.dynamic, max=seq), **in_run},
            }.get(name)


def beside(trainer: L.Trainer) -> bool:
    """Whether the fit's steps still run eagerly while a compile process works beside the run."""
    from runner.stack import Eager, stack_of

    stack = stack_of(trainer)
    return stack is not None and stack.step_mode.eager_because() is Eager.beside


class Finish(Marks):
    """Marks at batch 1, at the start and end of the steady window before ``n``, and at ``long``; stops the fit
    at ``n`` unless ``pending(trainer)`` (a compile beside the run): then it marks the batch the run switched
    at and each later batch that compiled, and stops ``steady`` batches after the last of them (or at
    ``long``). ``window``: the last steady window, (first mark, last mark)."""

    def __init__(self, n: int, steady: int, long: int, device: str,
                 pending: Callable[[L.Trainer], bool] = beside) -> None:
        super().__init__([1, n - steady, n, long], device)
        self.n, self.steady, self.long, self.pending = n, steady, long, pending
        self.window = (n - steady, n)
        self.switched: int | None = None
        self._waiting = False
        self._start = n  # the window's first mark while waiting
        self._seen = 0

    def _mark_once(self, step: int) -> None:
        if step not in self.times:
            self.mark(step)

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        super().on_train_batch_end(trainer, *args)
        step, events = self.step, self.events["compiles"] + self.events["graphs"]
        compiled, self._seen = events > self._seen, events
        if step == self.n:
            self._waiting = self.pending(trainer)
            trainer.should_stop = trainer.should_stop or not self._waiting
            return
        if not self._waiting or step < self.n:
            return
        if self.switched is None and not self.pending(trainer):
            self.switched = step  # the next batch compiles (from the compile process's cache)
        if self.switched is not None and (compiled or step == self.switched):
            self._start = step
            self._mark_once(step)
        if (self.switched is not None and step - self._start >= self.steady) or step >= self.long:
            self._mark_once(step)
            self.window, trainer.should_stop = (self._start, step), True

    def figures(self, started: float, long: int) -> dict[str, Any]:
        """Seconds from ``started`` (the fit's call) to batch 1, to ``n`` and to ``long`` (measured where the fit
        got there, else projected from the last steady window), and that window's step."""
        n, (first, end) = self.n, self.window
        step_s = (self.times[end] - self.times[first]) / max(1, end - first)
        window_compiles = self.between(first, end, "compiles") + self.between(first, end, "graphs")
        end_s = self.times[end] - started
        at_long, how = ((end_s, "measured") if end >= long else (end_s + (long - end) * step_s, "projected"))
        settled = window_compiles == 0
        return {"finish_s": self.times[n] - started, "first_step_s": self.times[1] - started,
                "wall_s": self.times[n] - self.times[0],
                "steady_step_ms": 1e3 * (self.times[n] - self.times[n - self.steady]) / self.steady,
                "steady_compiles": self.between(n - self.steady, n, "compiles"), "end_batch": end, "end_s": end_s,
                "end_step_ms": 1e3 * step_s, "settled": settled, "long": long, "switch_batch": self.switched,
                "at_long_s": at_long if settled else None, "at_long_how": how if settled else None,
                "compiles_after_n": self.between(n, end, "compiles") if end > n else 0}


def hf_varlen(name: str, size: dict[str, Any], device: str, backend: str) -> dict[str, Any]:
    """Fine-tune a BERT-shaped classifier on ``size["batches"]`` batches of stdlib paragraphs padded per batch
    (or to the bucket, for the bucket contestants), on if a compile beside the run is pending (``Finish``): the
    time from the fit's call to the first batch, to the last and to ``size["long"]``, compiles and recordings
    included; the steady step over the last ``size["steady"]`` before ``batches``."""
    from runner.data.classification import TextClassificationDataModule
    from runner.models.hf import SequenceClassifier
    from runner.stack.dynamic import resolve_pad_to

    seq, n, steady, long = size["seq"], size["batches"], size["steady"], size["long"]
    nodes = runner_nodes(name, seq, device)
    policy = nodes["dynamic"] if nodes else None
    data = TextClassificationDataModule(seq_len=seq, batch_size=size["batch"], max_examples=size["examples"],
                                        pad_to=resolve_pad_to(policy, seq) if policy else PadTo(), seed=0)
    data.setup("fit")
    loader = data.train_dataloader()
    seen: list[tuple[int, int, int]] = []  # (real tokens, padded tokens, length) of each batch, counted on the host
    collate = loader.collate_fn

    def counted(items: Any) -> Any:
        batch = collate(items)
        mask = batch[0]["attention_mask"]
        seen.append((int(mask.sum()), mask.numel(), mask.shape[1]))
        return batch

    loader.collate_fn = counted
    compile_kwargs, adamw, strategy = contestant(name, device, backend, **dict(nodes or {}))
    torch.manual_seed(0)
    model = SequenceClassifier(config="bert", overrides=size["bert"], num_labels=4)
    finish = Finish(n, steady, long, device)
    trainer = bench_trainer(device, strategy, long, [finish])
    started = time.perf_counter()
    trainer.fit(BenchModule(compile_kwargs, model=model, optimizer=_adamw(**adamw)), loader)
    figures = finish.figures(started, long)
    batches = seen[:n]  # Lightning fetches one batch ahead
    real, padded = sum(b[0] for b in batches), sum(b[1] for b in batches)
    ran = strategy.figures() if hasattr(strategy, "figures") else {}  # runner's report figures
    counts = finish.counts[figures["end_batch"]]
    return {**figures, "tokens_per_s": real / figures["finish_s"], "compiles": counts["compiles"],
            "recompiles": counts["recompiles"], "cudagraph_recordings": counts["graphs"], "batches": len(batches),
            "real_tokens": real, "padding_pct": 100.0 * (padded - real) / padded,
            "distinct_lengths": len({b[2] for b in batches}), "loss": float(trainer.callback_metrics["train/loss"]),
            "background": ran.get("compile/background_outcome") or ran.get("compile/background"),
            "background_room": ran.get("compile/background_room"),
            "cudagraphs_decision": ran.get("cudagraphs/decision"), "device": device_name(device)}
