"""Checks of the run's own config (trainer, data, model sizes, paths, value ranges), each returning one message
(key, value, fix) or None."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from runner.config.cache_secret import open_artifacts
from runner.config.paths import SHIPPED, resolve_artifacts_path
from runner.config.schema import CacheTrust, RunConfig
from runner.config.schema.data import (
    Batching,
    ImageDataSchema,
    InstructDataSchema,
    TextClassificationDataSchema,
    TextDataSchema,
)

_PRECISIONS = {"32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true", "transformer-engine"}
_ACCELERATORS = ("cpu", "cuda", "gpu", "mps", "auto")
_MAX_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}:\d{2}$")


def check_positive_counts(cfg: RunConfig) -> str | None:
    values = {
        "trainer.val_check_interval": cfg.trainer.val_check_interval,
        "trainer.log_every_n_steps": cfg.trainer.log_every_n_steps,
        "trainer.checkpoint_every_n_steps": cfg.trainer.checkpoint_every_n_steps,
        "telemetry.log_every_n_steps": cfg.telemetry.log_every_n_steps,
        "data.batch_size": getattr(cfg.data, "batch_size", None),
        "data.seq_len": getattr(cfg.data, "seq_len", None),
        "optimizer.lr": getattr(cfg.optimizer, "lr", None),
        "eval.generate_examples": cfg.eval.generate_examples,
        "eval.max_new_tokens": cfg.eval.max_new_tokens,
    }
    for key, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            return f"{key}={value} must be positive; give a number > 0."
    return None


def check_non_negative(cfg: RunConfig) -> str | None:
    values = {
        "trainer.limit_val_batches": cfg.trainer.limit_val_batches,
        "trainer.gradient_clip_val": cfg.trainer.gradient_clip_val,
        "telemetry.speedup_steps": cfg.telemetry.speedup_steps,
        "reliability.max_skipped_steps": cfg.reliability.max_skipped_steps,
        "dynamic.warmup_steps": cfg.dynamic.warmup_steps,
        "cudagraphs.warmup_steps": cfg.cudagraphs.warmup_steps,
        "after.sample_tokens": cfg.after.sample_tokens,
        "eval.generate_every_n_steps": cfg.eval.generate_every_n_steps,
    }
    for key, value in values.items():
        if value is not None and value < 0:
            return f"{key}={value} must be >= 0 (0 disables it where that makes sense)."
    return None


def check_fractions(cfg: RunConfig) -> str | None:
    val_fraction = getattr(cfg.data, "val_fraction", None)
    if val_fraction == 0 and getattr(cfg.data, "val_path", None) is None:
        # A run always validates, on data it never trains on: 0 would still hold one document out, or none at all.
        return ("data.val_fraction=0 would leave nothing to validate on: a run always validates, on data it never "
                "trains on. To train on all of data.path, give the validation data as files of their own "
                "(data.val_path=FILE); else a small share, e.g. data.val_fraction=0.01.")
    for key, value in (("data.val_fraction", val_fraction), ("model.dropout", getattr(cfg.model, "dropout", None))):
        if isinstance(value, (int, float)) and not 0.0 <= value < 1.0:
            return f"{key}={value} must be in [0, 1), e.g. {key}=0.1."
    return None


def check_accelerator(cfg: RunConfig) -> str | None:
    acc = cfg.trainer.accelerator
    if acc not in _ACCELERATORS:
        return f"trainer.accelerator={acc} is not one of {', '.join(_ACCELERATORS)}."
    if acc in ("cuda", "gpu") and not torch.cuda.is_available():
        return (f"trainer.accelerator={acc} but this machine has no CUDA device (torch {torch.__version__}). "
                "Use trainer=cpu (trainer.accelerator=cpu).")
    if acc == "mps" and not torch.backends.mps.is_available():
        return "trainer.accelerator=mps but this machine has no MPS device. Use trainer=cpu (trainer.accelerator=cpu)."
    devices = cfg.trainer.devices
    if acc in ("cuda", "gpu") and isinstance(devices, (list, tuple)):
        count = torch.cuda.device_count()
        missing = [d for d in devices if not isinstance(d, int) or not 0 <= d < count]
        if missing:
            return (f"trainer.devices={list(devices)}: this machine has {count} CUDA device(s) (indices 0 to "
                    f"{count - 1}). Name existing ones, e.g. trainer.devices=[0].")
    return None


def check_max_time(cfg: RunConfig) -> str | None:
    mt = cfg.trainer.max_time
    if mt is not None and not _MAX_TIME.match(mt):
        return f"trainer.max_time={mt} must be DD:HH:MM:SS, e.g. trainer.max_time=00:01:30:00 for 90 minutes."
    return None


def check_cache_artifacts(cfg: RunConfig) -> str | None:
    """Another run's cache artifacts that are not there, or may not be loaded (``cache_secret.open_artifacts``)."""
    src = cfg.reliability.load_cache_artifacts
    if src is None:
        return None
    path = resolve_artifacts_path(src)
    if not path.exists():
        return (f"reliability.load_cache_artifacts={src}: no artifacts there (looked for {path}). Point it at a "
                "finished run's directory (its compile_cache/artifacts.bin) or drop it.")
    _, problem = open_artifacts(path.read_bytes(), f"reliability.load_cache_artifacts={src}",
                                cfg.compile.cache_trust is CacheTrust.unsigned)
    return problem


# What data.path takes, for each data option runner ships (a subclass takes its base's words).
_WHAT_PATH_TAKES: dict[type, str] = {
    TextDataSchema: ("Point data.path at a directory or file of text, or drop it (data.path=null) to use the Python "
                     "stdlib source."),
    TextClassificationDataSchema: ("Point data.path at labelled rows (.jsonl/.json, .csv, .parquet, label<TAB>text "
                                   "lines), or drop it (data.path=null) for paragraphs of the Python stdlib source "
                                   "labelled by their package."),
    InstructDataSchema: ("Point data.path at a table of examples (.jsonl/.json, .csv, .parquet or a save_to_disk "
                         "folder) with prompt/response columns, Alpaca's instruction/input/output, or conversations; "
                         f"runner ships {SHIPPED}/instruct.jsonl (+recipe=instruct_tiny trains on it)."),
    ImageDataSchema: ("Point data.path at a folder of ROOT/CLASS/IMAGE files, or drop it (data.path=null) for "
                      "synthetic images."),
}


def check_data_path(cfg: RunConfig) -> str | None:
    path = getattr(cfg.data, "path", None)
    if path is not None and not Path(path).expanduser().exists():
        where = "" if Path(path).expanduser().is_absolute() else f" (a relative path is read from {Path.cwd()})"
        takes = next((words for kind, words in _WHAT_PATH_TAKES.items() if isinstance(cfg.data, kind)),
                     "Point data.path at the files your data module reads.")
        return f"data.path={path} does not exist{where}. {takes}"
    val_path = getattr(cfg.data, "val_path", None)
    if val_path is not None and not Path(val_path).expanduser().exists():
        return (f"data.val_path={val_path} does not exist. Point it at the files that validate, or drop it "
                "(data.val_path=null) to validate on a split of data.path.")
    return None


def check_length_grouping(cfg: RunConfig) -> str | None:
    grouping = getattr(cfg.data, "length_grouping", 0)
    if not isinstance(grouping, int) or grouping == 0:
        return None
    if grouping < 0:
        return f"data.length_grouping={grouping} must be >= 0 (batches per sorting window; 0 turns it off)."
    if getattr(cfg.data, "batching", None) is not Batching.documents:
        return (f"data.length_grouping={grouping} groups documents of similar length, but data.batching is "
                "packed (every window has the same length). Use data=text_documents or drop data.length_grouping.")
    return None


def check_model_fits_data(cfg: RunConfig) -> str | None:
    block = getattr(cfg.model, "block_size", None)
    seq_len = getattr(cfg.data, "seq_len", None)
    if isinstance(block, int) and isinstance(seq_len, int) and seq_len > block:
        return f"data.seq_len={seq_len} exceeds model.block_size={block}: raise model.block_size or lower data.seq_len."
    n_embd, n_head = getattr(cfg.model, "n_embd", None), getattr(cfg.model, "n_head", None)
    if isinstance(n_embd, int) and isinstance(n_head, int) and (n_head <= 0 or n_embd % n_head):
        return f"model.n_embd={n_embd} must be divisible by model.n_head={n_head}."
    return None


def check_trainer(cfg: RunConfig) -> str | None:
    t = cfg.trainer
    if t.precision not in _PRECISIONS:
        return (f"trainer.precision={t.precision} is not one of {sorted(_PRECISIONS)}; "
                "on a CPU use 32-true or bf16-mixed.")
    if t.max_steps <= 0 and t.max_time is None:
        return f"trainer.max_steps={t.max_steps}: give a positive number of steps (or trainer.max_time)."
    if t.accumulate_grad_batches < 1:
        return f"trainer.accumulate_grad_batches={t.accumulate_grad_batches} must be at least 1."
    return None


def check_generate_every(cfg: RunConfig) -> str | None:
    """Answers during training need prompts with answers, and the whole model on one rank."""
    if not cfg.eval.generate_every_n_steps:
        return None
    n = cfg.eval.generate_every_n_steps
    if not isinstance(cfg.data, InstructDataSchema):
        return (f"eval.generate_every_n_steps={n}: answers are scored against instruction data's (data=instruct: a "
                f"prompt and a response per row, or a chat), and this run's data is {type(cfg.data).__name__}. Drop "
                "eval.generate_every_n_steps, or train on instruction data.")
    if cfg.trainer.sharded:
        return (f"eval.generate_every_n_steps={n} with trainer.distributed=fsdp: each rank holds a shard of the "
                "weights, and the answers are written on one. Score the consolidated checkpoint after the run "
                "instead: python -m runner eval RUN_DIR --generate --ckpt checkpoints/consolidated.pt.")
    return None


CHECKS = [
    check_generate_every,
    check_positive_counts,
    check_non_negative,
    check_fractions,
    check_accelerator,
    check_max_time,
    check_cache_artifacts,
    check_data_path,
    check_length_grouping,
    check_model_fits_data,
    check_trainer,
]
