"""Typed schema of ``after``: what a run leaves for use after training, and how a resume treats data that changed
under it (docs/after-training.md); and of ``eval``, answers scored while it trains. Re-exported by
``runner.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class AfterConfig:
    """The ``after`` node: the model exported and a sample written at the end of the fit; a resume on changed data."""

    # Write the trained model to <run_dir>/model/ at the end of the fit, in its family's own format (save_pretrained for
    # transformers, timm's safetensors and config, runner's own models' state and config); python -m runner export
    # RUN_DIR writes the same from any checkpoint.
    export: bool = True
    # A causal LM writes this many new tokens after sample_prompt at the end of the fit, shown in report.md (0: none).
    sample_tokens: int = 64
    sample_prompt: str = "\n"  # What the end-of-fit sample starts from.
    # A resume trains on even where the data (data.path's files, data.val_path's, the tokenizer) changed since the run
    # recorded it: the checkpoint's place in the data and the validation split then mean something else, and the run's
    # data section says what changed. runner resume RUN_DIR --allow-changed-data sets it for that resume only (it is
    # never carried to the next).
    allow_changed_data: bool = False
    # A Hugging Face Hub model repo, ORG/NAME, that the run's export (<run_dir>/model) is pushed to at the end of the
    # run, after report.json is written, with a model card (created where it does not exist; a token: HF_TOKEN or hf
    # auth login). A failed push leaves the run as it trained: a warning names the command that pushes it again (python
    # -m runner export RUN_DIR --push-to-hub ORG/NAME). None: nothing is pushed.
    push_to_hub: Optional[str] = None
    push_private: bool = False  # A repo push_to_hub creates is private (an existing repo keeps its visibility).


@dataclass
class EvalConfig:
    """The ``eval`` node: answers scored during training (``runner eval --generate`` scores a checkpoint's)."""

    # Every N training steps an instruction run answers the first generate_examples held-out prompts (greedy, its
    # template) and logs eval/answers/exact and /contains (0: never).
    generate_every_n_steps: int = 0
    generate_examples: int = 16
    max_new_tokens: int = 64  # The longest answer, in tokens.
