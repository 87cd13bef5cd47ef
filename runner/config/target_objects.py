"""What a ``_target_`` names, found before anything runs: the object, imported as Hydra's ``instantiate`` imports it,
and the configured model built on the meta device."""

from __future__ import annotations

import dataclasses
import traceback
from dataclasses import dataclass
from typing import Any, NamedTuple

from runner import hydra_internals


@dataclass(frozen=True)
class ImportFailure:
    """A module that raised while being imported: the module, its top-level package, the error."""

    module: str
    package: str
    error: str  # The original exception as Type: first line.
    importer: str | None  # The outermost module whose import led to module's, when it is another one.

    def message(self, setting: str, target: str) -> str:
        """One paragraph: ``setting`` cannot be imported, which package failed with what error, and the fix."""
        via = f" (while importing {self.importer})" if self.importer else ""
        raised = f" (raised by {self.module})" if self.module != self.package else ""
        head = (f"{setting} cannot be imported: importing the package {self.package} failed{via}: "
                f"{self.error}{raised}. The dotted path is not the problem.")
        if self.package == target.split(".")[0]:
            return f"{head} Fix the error in {self.module}, or in what it imports."
        import torch

        return (f"{head} {self.package} is installed but does not import (a build made for another torch "
                f"fails this way; this is torch {torch.__version__}): reinstall a {self.package} that matches "
                f"this torch, or uninstall it if nothing needs it.")


def error_text(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}".rstrip(": ")


def import_failure(e: BaseException) -> ImportFailure | None:
    """The module that raised while it was being imported (``e`` or its cause); None for a path that names nothing.
    The two want different fixes, and only a module that raised has a ``<module>`` frame in its traceback."""
    cause: BaseException | None = e
    while cause is not None:
        # the modules whose top-level code is in the traceback, outermost first
        modules = [str(frame.f_globals.get("__name__", "?")) for frame, _ in traceback.walk_tb(cause.__traceback__)
                   if frame.f_code.co_name == "<module>"]
        if modules:
            module = modules[-1]
            importer = modules[0] if modules[0] != module else None
            return ImportFailure(module, module.split(".")[0], error_text(cause), importer)
        cause = cause.__cause__
    return None


def locate(target: str) -> tuple[Any, ImportFailure | str | None]:
    """The object ``target`` names and None; or None and an :class:`ImportFailure` or the error's text."""
    try:
        return hydra_internals.locate(target), None
    except Exception as e:  # ImportError, AttributeError, or a module failing on import (any exception)
        failure = import_failure(e)
        return None, failure if failure is not None else error_text(e.__cause__ or e)


class TokenRange(NamedTuple):
    """The token ids a data module can give a model (its ``token_range``): the largest, the pad id, their source."""

    largest: int
    pad: int
    source: str


class Embedding(NamedTuple):
    """How many ids a model embeds (its ``input_vocabulary``), from where, and the setting that changes it (None:
    fixed)."""

    rows: int
    source: str
    setting: str | None


def fields(node: Any) -> dict[str, Any]:
    """A ``_target_`` node's keys, without its schema's ``NOT_ARGUMENTS`` (settings the config uses itself)."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        skip = getattr(type(node), "NOT_ARGUMENTS", ())
        return {f.name: getattr(node, f.name) for f in dataclasses.fields(node) if f.name not in skip}
    return dict(node) if isinstance(node, dict) else {}


HYDRA_KEYS = frozenset({"_target_", "_partial_", "_args_", "_recursive_", "_convert_"})


def declared(node: Any, name: str) -> Any | None:
    """What the class ``node._target_`` declares as the static method ``name``, called with the node's fields."""
    values = fields(node)
    target = values.get("_target_")
    cls = locate(target)[0] if isinstance(target, str) else None
    declare = getattr(cls, name, None)
    if not callable(declare):
        return None
    return declare(**{k: v for k, v in values.items() if k not in HYDRA_KEYS})


def declared_or_none(node: Any, name: str) -> Any | None:
    """:func:`declared`, or None where the class fails on these arguments (its own check says why)."""
    try:
        return declared(node, name)
    except Exception:
        return None


def meta_model(node: Any) -> Any | None:
    """The configured model built on the meta device (shapes and ``requires_grad``, no memory); None when it cannot be
    built that way (its constructor reads data, or fails: the run says why)."""
    import torch
    from hydra.utils import instantiate

    try:
        with torch.device("meta"):
            return instantiate(node)
    except Exception:
        return None
