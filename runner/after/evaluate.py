"""``runner eval``: a checkpoint's validation metrics on the run's data or other files, in ``eval.json`` and a table.

Language models: loss, perplexity and, where the ids are bytes, bits per byte (a chunked-loss run is evaluated
chunked, so the ``[tokens x vocab]`` logits are never built). Classifiers: accuracy, macro-F1, per-class precision
and recall, a confusion-matrix PNG. Preference pairs: TRL's metrics. The pass runs eagerly unless compiling pays."""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from runner.atomic_files import atomic_write_bytes
from runner.build import val_metric
from runner.config.schema import RunConfig
from runner.data.sequences.padding import IGNORE_INDEX
from runner.data.store.progress import Progress
from runner.data.traits import ValMetric
from runner.metrics import counted
from runner.telemetry.verdict import break_even_text
from runner.torch_internals import runtime


def resolve_mode(cfg: RunConfig, report: dict[str, Any], batches: int) -> tuple[bool, str]:
    """Whether to compile the evaluation, and why: when the run's ``report`` says compiling paid within ``batches``."""
    if not cfg.compile.scope.row.compiles:
        return False, f"eager: the run was not compiled (compile.scope={cfg.compile.scope.value})"
    paid = break_even_text(report)
    if paid is None:
        status = report.get("perf/speedup_status")
        return False, "eager: the run's report measured no speedup from compiling" + (f" ({status})" if status else "")
    if paid == "never":
        return False, "eager: compiling did not pay for itself in the run (break-even: never)"
    if batches <= int(paid):
        return False, (f"eager: {counted(batches, 'batch', 'batches')}, no more than the {paid} steps compiling took "
                       "to pay for itself")
    return True, (f"compiled (compile.backend={cfg.compile.backend}): {batches} batches, more than the {paid} steps "
                  "compiling took to pay for itself in the run")


def eval_device(cfg: RunConfig) -> torch.device:
    """The run's device when this machine has it, else the CPU."""
    try:
        device = torch.device(cfg.trainer.single_device())
    except RuntimeError:
        return torch.device("cpu")
    missing = {"cuda": not torch.cuda.is_available(), "mps": not torch.backends.mps.is_available()}
    return torch.device("cpu") if missing.get(device.type) else device


def scored(loader: Any, progress: Progress | None) -> Iterator[Any]:
    """``loader``'s batches, ``progress`` told of each once it is scored (the caller's loop body has run)."""
    for batch in loader:
        yield batch
        if progress is not None:
            progress.advance(1)
    if progress is not None:
        progress.finish()


def evaluate(forward: Any, loader: Any, device: torch.device, cfg: RunConfig, labels: list[str],
             loss_sum: Any = None, progress: Progress | None = None) -> dict[str, Any]:
    """The metrics of one pass of ``forward`` over ``loader``; ``loss_sum``: a causal LM's chunked summed loss."""
    from lightning.fabric.utilities import move_data_to_device

    total, counted, examples = 0.0, 0, 0
    metrics = None
    with torch.no_grad():
        for batch in scored(loader, progress):
            x, y = move_data_to_device(batch, device)
            counted += int((y != IGNORE_INDEX).sum())
            examples += int(y.shape[0])
            if loss_sum is not None and y.dim() > 1:  # a target per position: the loss is all a causal LM reports
                total += float(loss_sum(x, y))
                continue
            logits = forward(x)
            total += float(F.cross_entropy(logits.flatten(0, -2).float(), y.flatten(), ignore_index=IGNORE_INDEX,
                                           reduction="sum"))
            if y.dim() == 1:  # one class per example
                metrics = metrics or _classifier_metrics(logits.shape[-1], device)
                for metric in metrics.values():
                    metric.update(logits.float(), y)
    loss = total / max(1, counted)
    figures: dict[str, Any] = {"eval/examples": examples, "eval/loss": round(loss, 6)}
    if metrics is None:
        figures.update({"eval/tokens": counted, "eval/perplexity": round(math.exp(min(loss, 700.0)), 4)})
        if val_metric(cfg) is ValMetric.bits_per_byte:  # byte ids, one byte per target: nats / ln 2 per byte
            figures["eval/bpb"] = round(loss / math.log(2), 6)
        return figures
    values = {name: metric.compute().cpu() for name, metric in metrics.items()}
    confusion = values["confusion"].tolist()
    figures.update({
        "eval/accuracy": round(float(values["accuracy"]), 6), "eval/macro_f1": round(float(values["macro_f1"]), 6),
        "eval/labels": labels[:len(confusion)] + [str(i) for i in range(len(labels), len(confusion))],
        "eval/precision": [round(float(v), 6) for v in values["precision"]],
        "eval/recall": [round(float(v), 6) for v in values["recall"]],
        "eval/support": [int(sum(row)) for row in confusion], "eval/confusion": confusion,
    })
    return figures


def evaluate_pairs(pair_outputs: Any, loader: Any, device: torch.device,
                   progress: Progress | None = None) -> dict[str, Any]:
    """TRL's figures over every pair of ``loader`` (``PreferenceModule.pair_outputs``, compiled or not)."""
    from lightning.fabric.utilities import move_data_to_device

    from runner.training import preference_losses

    sums: dict[str, float] = {}
    pairs, loss = 0.0, 0.0
    with torch.no_grad():
        for batch in scored(loader, progress):
            batch = move_data_to_device(batch, device)
            out = pair_outputs(batch)
            mask = batch[0].pairs
            n = float(mask.sum())
            batch_loss, _ = preference_losses.reduce(out, mask)
            loss, pairs = loss + float(batch_loss) * n, pairs + n
            values = {"eval/rewards/accuracies": (out.chosen_rewards > out.rejected_rewards).float(),
                      "eval/rewards/margins": out.chosen_rewards - out.rejected_rewards,
                      "eval/rewards/chosen": out.chosen_rewards, "eval/rewards/rejected": out.rejected_rewards,
                      "eval/logps/chosen": out.chosen_logps, "eval/logps/rejected": out.rejected_logps}
            for key, value in values.items():
                sums[key] = sums.get(key, 0.0) + float((value * mask).sum())
    n = max(pairs, 1.0)
    return {"eval/pairs": int(pairs), "eval/loss": round(loss / n, 6), **{k: round(v / n, 6) for k, v in sums.items()}}


def run_pairs(module: Any, datamodule: Any, cfg: RunConfig, compiled: bool,
              progress: Progress | None = None) -> dict[str, Any]:
    """Score a ``PreferenceModule`` on ``datamodule``'s validation pairs on the evaluation device."""
    from runner.training.reference import Precomputed

    device = eval_device(cfg)
    module.to(device).eval()
    if isinstance(module.reference, Precomputed):
        module.reference.prepare(module.model, datamodule, device)
    with _compiling(cfg, compiled) as compile_:
        return evaluate_pairs(compile_(module.pair_outputs), datamodule.val_dataloader(), device, progress)


@contextlib.contextmanager
def _compiling(cfg: RunConfig, compiled: bool) -> Iterator[Callable[[Any], Any]]:
    """``torch.compile`` as the run compiled (the compiled code dropped after the block), or nothing."""
    if not compiled:
        yield lambda fn: fn
        return
    c = cfg.compile
    try:
        yield lambda fn: torch.compile(fn, backend=c.backend, mode=c.mode, options=c.options or None)
    finally:
        runtime.reset_compiler()


def _classifier_metrics(num_classes: int, device: torch.device) -> dict[str, Any]:
    from torchmetrics import classification as tm

    made = {"accuracy": tm.MulticlassAccuracy(num_classes, average="micro"),
            "macro_f1": tm.MulticlassF1Score(num_classes, average="macro"),
            "precision": tm.MulticlassPrecision(num_classes, average=None, zero_division=0),
            "recall": tm.MulticlassRecall(num_classes, average=None, zero_division=0),
            "confusion": tm.MulticlassConfusionMatrix(num_classes)}
    return {name: metric.to(device) for name, metric in made.items()}


def run_pass(module: torch.nn.Module, loader: Any, cfg: RunConfig, labels: list[str], compiled: bool,
             progress: Progress | None = None) -> dict[str, Any]:
    """Evaluate ``module`` on the evaluation device, compiled as the run was when ``compiled``."""
    device = eval_device(cfg)
    module.to(device).eval()
    loss_sum = chunked_loss_sum(module)
    with _compiling(cfg, compiled) as compile_:
        return evaluate(compile_(module), loader, device, cfg, labels, compile_(loss_sum) if loss_sum else None,
                        progress)


def chunked_loss_sum(module: torch.nn.Module) -> Any:
    """``(inputs, targets) -> summed loss`` through the chunked loss ``module`` trained with, else None."""
    loss: Any = getattr(module, "loss_fn", None)
    return functools.partial(loss, module.model, reduction="sum") if getattr(loss, "chunked", False) else None


def confusion_png(figures: dict[str, Any], path: Path) -> None:
    """The confusion matrix as a heat map, counts written in the cells (up to 20 classes)."""
    from matplotlib.figure import Figure

    matrix, names = figures["eval/confusion"], figures["eval/labels"]
    n = len(matrix)
    fig = Figure(figsize=(2 + 0.5 * n, 1.5 + 0.5 * n))
    ax = fig.subplots()
    image = ax.imshow(matrix, cmap="Blues")
    fig.colorbar(image, ax=ax)
    ax.set_xticks(range(n), names, rotation=45, ha="right")
    ax.set_yticks(range(n), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"accuracy {figures['eval/accuracy']:.3f}, macro-F1 {figures['eval/macro_f1']:.3f}")
    peak = max((max(row) for row in matrix), default=0)
    if n <= 20:
        for i, row in enumerate(matrix):
            for j, count in enumerate(row):
                ax.text(j, i, str(count), ha="center", va="center", color="white" if count > peak / 2 else "black")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def write_eval(figures: dict[str, Any], out: Path) -> list[Path]:
    """``out`` (JSON) and, for a classifier, the confusion matrix beside it (``<stem>_confusion.png``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes((json.dumps(figures, indent=2) + "\n").encode(), out, one_writer=False)
    written = [out]
    if "eval/confusion" in figures:
        png = out.with_name(f"{out.stem}_confusion.png")
        confusion_png(figures, png)
        written.append(png)
    return written
