"""Asking an instruction-tuned run the way it was trained: the question put in the run's prompt template or chat
template, and writing stopped at the EOS that ends its answers (``<run_dir>/prompt.json``, written by the data
report at the start of the fit)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from runner.after.family import Tokens
from runner.after.generate import Sampling
from runner.data.instruct_formats import generation_prompt
from runner.telemetry.data_report import read_prompt


def asked(run_dir: Path, text: str, tokens: Tokens, sampling: Sampling) -> tuple[str, Sampling]:
    """``text`` as the run's prompt, and ``sampling`` stopping at its EOS; both unchanged for a run whose data was
    not instruction data."""
    info = read_prompt(run_dir)
    if info is None:
        return text, sampling
    prompt = generation_prompt(info, text, tokens.tokenizer() if tokens.directory else None)
    return prompt, dataclasses.replace(sampling, eos_id=info.get("eos_id"))
