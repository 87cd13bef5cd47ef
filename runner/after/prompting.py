"""Asking an instruction-tuned model the way it was trained: the question in the run's prompt or chat template
(``<run_dir>/prompt.json``, which every export carries), and generation stopped at the EOS that ends its answers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from runner.after.export import METADATA
from runner.after.family import Tokens
from runner.after.generate import Sampling
from runner.data.instruct.formats import Kind, generation_prompt
from runner.telemetry.data_report import read_prompt


def prompt_of(directory: Path) -> dict[str, Any] | None:
    """The prompt format ``directory`` (a run or an export) was trained with; None without instruction data."""
    meta = Path(directory) / METADATA
    if meta.is_file():
        found = json.loads(meta.read_text()).get("prompt")
        return found if isinstance(found, dict) else None
    return read_prompt(directory)


@dataclasses.dataclass(frozen=True)
class Asked:
    """A question as the model was trained to read it: the prompt, the sampling that stops at its EOS, and whether
    the tokenizer adds its special tokens (a chat template writes its own)."""

    prompt: str
    sampling: Sampling
    special: bool = True


def asked(info: dict[str, Any] | None, text: str, tokens: Tokens, sampling: Sampling) -> Asked:
    """``text`` in the prompt format ``info`` (:func:`prompt_of`), ``sampling`` stopping at its EOS."""
    if info is None:
        return Asked(text, sampling)
    prompt = generation_prompt(info, text, tokens.tokenizer() if tokens.directory else None)
    eos = info.get("eos_id")
    return Asked(prompt, dataclasses.replace(sampling, eos_ids=() if eos is None else (int(eos),)),
                 info.get("kind") != Kind.chat.value)
