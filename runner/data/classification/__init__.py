"""Labelled text for sequence classifiers (``data=text_classification``):"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"TextClassificationDataModule": "runner.data.classification.datamodule"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runner.data.classification' has no attribute {name!r}")
