"""Preference pairs for a causal LM (``data=preference``, ``objective=dpo|simpo|orpo``; docs/preference.md), read
as instruction data is (:mod:`runner.data.instruct`: its templates, chat turns and encoding):

- ``datamodule``: :class:`PreferenceDataModule`, the splits and batches, everything that makes the data unusable
  refused before the run;
- ``formats``: the four shapes pairs come in and how a row becomes a prompt and two completions as text;
- ``read``: the table read once: its shape checked, its rows tokenized on every core into a store;
- ``encode``: a chunk of rows as token ids (the encoder worker processes run), then each pair fitted to
  ``data.seq_len``;
- ``batch``: both sequences of every pair in one batch, padded or packed, and which sequence each target belongs to
  (:class:`~runner.data.preference.batch.PairInputs`, which the preference loss reads).

The data module is this package's interface (``data._target_: runner.data.preference.PreferenceDataModule``),
imported on first use: importing ``encode`` (what a worker process unpickles) or ``batch`` (what the preference
loss reads) imports neither it nor Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"PreferenceDataModule": "runner.data.preference.datamodule"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runner.data.preference' has no attribute {name!r}")
