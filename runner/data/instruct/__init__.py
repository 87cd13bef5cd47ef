"""Instruction and chat data for a causal LM, the loss on the answers (``data=instruct``, docs/data.md):"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"InstructDataModule": "runner.data.instruct.datamodule"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runner.data.instruct' has no attribute {name!r}")
