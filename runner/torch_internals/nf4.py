"""torchao's NF4 (QLoRA's 4-bit format): the private module that holds it, and whether it runs here."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_MODULES = ("torchao.quantization.quantize_.workflows.nf4.nf4_tensor", "torchao.dtypes.nf4tensor")  # newest first


@contextmanager
def torchao_import_quiet() -> Iterator[None]:
    """Import torchao (alone or through transformers) without its import-time warnings, which do not concern NF4."""
    quiet = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for q, level in zip(quiet, levels, strict=True):
            q.setLevel(level)


@functools.cache
def nf4_module() -> Any:
    """torchao's NF4 module (``to_nf4``, ``NF4Tensor``, ``SubclassTensorArgs``); ImportError when none imports."""
    import importlib

    errors = []
    with torchao_import_quiet():
        for name in _MODULES:
            try:
                return importlib.import_module(name)
            except ImportError as e:
                errors.append(f"{name}: {e}")
    raise ImportError("; ".join(errors))


@functools.cache
def nf4_problem(device: str = "cpu") -> str | None:
    """Why NF4 cannot run on ``device`` here (torchao missing or broken, or a round trip that fails), or None."""
    import torch

    try:
        module = nf4_module()
    except ImportError as e:
        if "No module named 'torchao'" in str(e):
            return "torchao is not installed"
        return f"torchao does not import ({str(e).splitlines()[0]})"
    except Exception as e:  # a torchao built for another torch can fail on import with anything
        return f"torchao does not import ({_first_line(e)})"
    try:
        w = torch.linspace(-1, 1, 64 * 256, device=device).reshape(64, 256)
        back = module.to_nf4(w, 64, 256).get_original_weight()
        if not torch.allclose(back, w, atol=0.2):
            error = float((back - w).abs().max())
            return f"torchao's NF4 round trip on {device} returned other values (max error {error:.3g})"
    except Exception as e:
        return f"torchao's NF4 does not run on {device} ({_first_line(e)})"
    return None


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
