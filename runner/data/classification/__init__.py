"""Labelled text for sequence classifiers (``data=text_classification``):

- ``datamodule``: :class:`TextClassificationDataModule`, batches padded per the shape policy, one label per text;
- ``labelled``: the labelled rows ``data.path`` names (a table, ``label<TAB>text`` files, or the stdlib task) and
  what was left out;
- ``labels``: a classifier's labels from a column, class ids or class names, never both.

The data module is this package's interface (``data._target_:
runner.data.classification.TextClassificationDataModule``), imported on first use: importing ``labelled`` (which
``runner eval`` reads) imports neither it nor Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"TextClassificationDataModule": "runner.data.classification.datamodule"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runner.data.classification' has no attribute {name!r}")
