"""Text for causal language models (``data=text``, ``data=text_documents``, ``data=tokenized_text``):"""

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
