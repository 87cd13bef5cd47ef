"""What a ``_target_`` names, found before anything runs: the object itself (imported as Hydra's
``instantiate`` imports it, a failure in words) and the configured model, built on the meta device.

An import can fail in two ways that want different fixes. The dotted path names nothing (a typo, a
module not on the path): check the path. Or a module on the way was found and raised while it was
being imported (a bug in it, or a package it imports that is installed but broken, such as a
torchvision built for another torch): the path is fine, and the message names the package whose
import failed and its error. The traceback tells them apart: only the second has a module's own
code (a ``<module>`` frame) in it.
"""

from __future__ import annotations

import dataclasses
import types
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
        """One paragraph: ``setting`` (``model._target_=...``) cannot be imported, which package's import
        failed and with what error, and the fix: the user's own module, or a broken installed package."""
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


def _error_text(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}".rstrip(": ")


def _module_frames(tb: types.TracebackType | None) -> list[str]:
    """Names of the modules whose top-level code is in the traceback, outermost first."""
    names: list[str] = []
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "<module>":
            names.append(str(frame.f_globals.get("__name__", "?")))
        tb = tb.tb_next
    return names


def import_failure(e: BaseException) -> ImportFailure | None:
    """The module that raised while it was being imported, if ``e`` (or what it was raised from) was
    raised by a module's own code; None when no module's code ran into it (a path that names nothing)."""
    cause: BaseException | None = e
    while cause is not None:
        modules = _module_frames(cause.__traceback__)
        if modules:
            module = modules[-1]
            importer = modules[0] if modules[0] != module else None
            return ImportFailure(module, module.split(".")[0], _error_text(cause), importer)
        cause = cause.__cause__
    return None


def locate(target: str) -> tuple[Any, ImportFailure | str | None]:
    """The object ``target`` names and None; or None and why not: an :class:`ImportFailure` when a
    module raised while being imported, else the error's text (the dotted path names nothing)."""
    try:
        return hydra_internals.locate(target), None
    except Exception as e:  # ImportError, AttributeError, or a module failing on import (any exception)
        failure = import_failure(e)
        return None, failure if failure is not None else _error_text(e.__cause__ or e)


class TokenRange(NamedTuple):
    """The token ids a data module can give a model: the largest, the pad id, and where they come from (the
    ``token_range`` a text data module declares)."""

    largest: int
    pad: int
    source: str


class Embedding(NamedTuple):
    """How many token ids a model embeds (the ``input_vocabulary`` a model declares): ``rows``, where that number
    comes from, and the setting that changes it (None: a saved model, whose size is fixed)."""

    rows: int
    source: str
    setting: str | None


def fields(node: Any) -> dict[str, Any]:
    """A ``_target_`` node's keys: a schema dataclass or, for an option without one, a dict. A schema's
    ``NOT_ARGUMENTS`` (settings the config itself uses, such as data.split of a Hub data set) are left out: they
    are no argument of the class."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        skip = getattr(type(node), "NOT_ARGUMENTS", ())
        return {f.name: getattr(node, f.name) for f in dataclasses.fields(node) if f.name not in skip}
    return dict(node) if isinstance(node, dict) else {}


HYDRA_KEYS = frozenset({"_target_", "_partial_", "_args_", "_recursive_", "_convert_"})


def declared(node: Any, name: str) -> Any | None:
    """What the class ``node._target_`` names declares as ``name`` (a static method), called with the node's
    fields; None when the class does not import or declares no such thing."""
    values = fields(node)
    target = values.get("_target_")
    cls = locate(target)[0] if isinstance(target, str) else None
    declare = getattr(cls, name, None)
    if not callable(declare):
        return None
    return declare(**{k: v for k, v in values.items() if k not in HYDRA_KEYS})


def meta_model(node: Any) -> Any | None:
    """The model ``node`` (the ``model`` config) configures, built on the meta device: its parameters
    have shapes and ``requires_grad``, but no memory and no initial values. None when it cannot be
    built that way (a constructor that reads data, or one that fails: the run will say why)."""
    import torch
    from hydra.utils import instantiate

    try:
        with torch.device("meta"):
            return instantiate(node)
    except Exception:
        return None
