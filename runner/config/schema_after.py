"""Typed schema of ``after``: what a run leaves for use after training (docs/after-training.md),
re-exported by ``runner.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AfterConfig:
    """The ``after`` node: the model exported and a sample written at the end of the fit."""

    export: bool = True
    """Write the trained model to <run_dir>/model/ at the end of the fit, in its family's own format
    (save_pretrained for transformers, timm's safetensors and config, runner's own models' state and config);
    ``python -m runner export RUN_DIR`` writes the same from any checkpoint."""
    sample_tokens: int = 64
    """A causal LM writes this many new tokens after ``sample_prompt`` at the end of the fit, shown in
    report.md (0: none)."""
    sample_prompt: str = "\n"
    """What the end-of-fit sample starts from."""
