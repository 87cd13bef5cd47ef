"""What a run leaves at the end of its fit (the ``after`` config node): the model exported to
``<run_dir>/model`` and, for a causal LM, a short sample of its text for report.md.

Neither may fail a run that trained: a failure is logged with the command that does it again, and the
figure says what happened.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from torch import nn

from runner.after.export import EXPORT_DIR, export_model
from runner.after.family import tokens_of, writes_text
from runner.after.generate import Sampling, write_text
from runner.after.prompting import asked
from runner.config.schema import RunConfig
from runner.figures.run import RUN_EXPORT, RUN_SAMPLE
from runner.telemetry.data_report import read_prompt

log = logging.getLogger(__name__)


def at_end_of_fit(cfg: RunConfig, model: nn.Module, run_dir: Path, checkpoint: Path | None,
                  step: int) -> dict[str, Any]:
    """Export ``model`` (``TrainModule.model``, or a user's LightningModule) and sample it, as ``cfg.after``
    says; the figures (``run/export``, ``run/sample``)."""
    figures: dict[str, Any] = {}
    if cfg.trainer.sharded:  # FSDP2's parameters are shards: the whole model is in the consolidated checkpoint
        if cfg.after.export:
            figures[RUN_EXPORT] = ("not at the end of an FSDP fit: python -m runner export RUN_DIR --ckpt "
                                   "checkpoints/consolidated.pt (trainer.fsdp.consolidate=true writes it)")
        return figures
    if cfg.after.export:
        figures[RUN_EXPORT] = _export(cfg, model, run_dir, checkpoint, step)
    tokens = tokens_of(cfg)
    if cfg.after.sample_tokens and writes_text(model) and tokens is not None:
        sampling = Sampling(max_new_tokens=cfg.after.sample_tokens, seed=cfg.seed)
        try:
            ask = asked(read_prompt(run_dir), cfg.after.sample_prompt, tokens, sampling)
            figures[RUN_SAMPLE] = ask.prompt + write_text(model, tokens, ask.prompt, ask.sampling, ask.special)
        except Exception as e:  # noqa: BLE001 - a sample is a courtesy: the run trained
            log.warning("no sample for report.md (%s: %s); python -m runner generate RUN_DIR writes one",
                        type(e).__name__, e)
    return figures


def _export(cfg: RunConfig, model: nn.Module, run_dir: Path, checkpoint: Path | None, step: int) -> str:
    from runner.quiet import quiet_transformers_bars

    out = run_dir / EXPORT_DIR
    try:
        with quiet_transformers_bars():
            export_model(model, cfg, run_dir, out, str(checkpoint) if checkpoint else None, step)
    except Exception as e:  # noqa: BLE001 - the run trained and its checkpoint is on disk
        log.warning("the model was not exported (%s: %s); python -m runner export %s --force writes it from the "
                    "checkpoint", type(e).__name__, e, run_dir)
        return f"failed: {type(e).__name__}: {e}"
    return str(out)
