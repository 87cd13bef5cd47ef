"""Instruction and chat data for a causal LM, the loss on the answers (``data=instruct``, docs/data.md):

- ``datamodule``: :class:`InstructDataModule`, padded or packed batches, everything that makes the data unusable
  refused before the run;
- ``formats``: the three shapes rows come in (prompt/response, Alpaca, chat) and how a row becomes text with its
  answers marked;
- ``chat``: conversations: every turn's role checked and mapped (``data.roles``), rendered with a chat template;
- ``encode``: a chunk of rows as token ids with their answers' runs, the encoder worker processes run (torch-free);
- ``prepare``: the rows prepared once into a store named by what their ids depend on;
- ``fit``: the prepared examples fitted to ``data.seq_len`` (cut, left out, what is in the loss), from their bounds;
- ``layout``: which examples train and validate, fitted and packed, computed once and stored;
- ``summary``: instruction data's data section (examples, prompt and answer tokens, turns, packing).

The data module is this package's interface (``data._target_: runner.data.instruct.InstructDataModule``), imported on
first use: importing ``encode`` (what a worker process unpickles, torch-free) or ``formats`` (the prompts
``runner.after`` writes) imports neither it nor Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"InstructDataModule": "runner.data.instruct.datamodule"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runner.data.instruct' has no attribute {name!r}")
