"""Preference pairs for a causal LM (``data=preference``, ``objective=dpo|simpo|orpo``; docs/preference.md), read as
instruction data is:"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"PreferenceDataModule": "runner.data.preference.datamodule"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runner.data.preference' has no attribute {name!r}")
