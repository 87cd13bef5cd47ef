"""Text for causal language models (``data=text``, ``data=text_documents``, ``data=tokenized_text``):

- ``datamodule``: :class:`TextDataModule` and :class:`TokenizedTextDataModule`, packed windows or one sequence per
  document, bytes or a saved tokenizer's ids;
- ``documents``: a corpus as token ids (the stdlib source, text files or a table's text column): every document's
  pieces and where they lie in one flat sequence of ids.

The data modules are this package's interface (``data._target_: runner.data.text.TextDataModule``), imported on first
use: importing ``documents`` imports neither them nor Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TextDataModule": "runner.data.text.datamodule",
    "TokenizedTextDataModule": "runner.data.text.datamodule",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runner.data.text' has no attribute {name!r}")
