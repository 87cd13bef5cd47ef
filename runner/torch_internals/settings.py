"""Process-wide torch settings changed by one owner and restored (:class:`TorchSettings`), and those the stack makes."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from typing import Any

import torch

from runner.torch_internals.observation import compilation_metrics_limit, set_compilation_metrics_limit

_MISSING = object()
MANAGED: dict[str, Callable[[], Any]] = {}  # every setting a TorchSettings changed -> its reader (the no-leak test)


class TorchSettings:
    """Process-wide torch settings changed by one owner; :meth:`restore` puts back what each held before."""

    def __init__(self) -> None:
        self._undo: dict[str, Callable[[], None]] = {}

    def _config(self, module: str, key: str, value: Any) -> None:
        mod = importlib.import_module(module)
        *parents, leaf = key.split(".")
        obj = mod
        for part in parents:
            obj = getattr(obj, part)
        name = f"{module}.{key}"
        if name not in self._undo:
            prior = getattr(obj, leaf)
            self._undo[name] = lambda: setattr(obj, leaf, prior)
        MANAGED.setdefault(name, lambda: getattr(obj, leaf))
        setattr(obj, leaf, value)

    def dynamo(self, key: str, value: Any) -> None:
        """``torch._dynamo.config.<key> = value`` (e.g. recompile_limit, trace_autograd_ops)."""
        self._config("torch._dynamo.config", key, value)

    def inductor(self, key: str, value: Any) -> None:
        """``torch._inductor.config.<key> = value``; dotted keys reach sub-configs (``triton.cudagraphs``)."""
        self._config("torch._inductor.config", key, value)

    def functorch(self, key: str, value: Any) -> None:
        """``torch._functorch.config.<key> = value`` (e.g. activation_memory_budget)."""
        self._config("torch._functorch.config", key, value)

    def compiler(self, key: str, value: Any) -> None:
        """``torch.compiler.config.<key> = value`` (e.g. cache_key_tag)."""
        self._config("torch.compiler.config", key, value)

    def patch(self, owner: type, attribute: str, value: Any) -> None:
        """Replace ``owner.attribute`` (a method of a torch class) with ``value``, put back by ``restore``."""
        name = f"{owner.__module__}.{owner.__qualname__}.{attribute}"
        if name not in self._undo:
            prior = vars(owner).get(attribute, _MISSING)
            self._undo[name] = lambda: setattr(owner, attribute, prior) if prior is not _MISSING \
                else delattr(owner, attribute)
        MANAGED.setdefault(name, lambda: getattr(owner, attribute))
        setattr(owner, attribute, value)

    def env(self, key: str, value: str | None) -> None:
        """Set (or, with None, unset) an environment variable torch reads, e.g. TORCHINDUCTOR_CACHE_DIR."""
        name = f"env.{key}"
        if name not in self._undo:
            prior = os.environ.get(key)
            self._undo[name] = lambda: _set_env(key, prior)
        MANAGED.setdefault(name, lambda: os.environ.get(key))
        _set_env(key, value)

    def guard_collectives(self, enabled: bool) -> None:
        """``torch.compiler.set_enable_guard_collectives`` (returns the prior setting, which we keep)."""
        prior = torch.compiler.set_enable_guard_collectives(enabled)
        self._undo.setdefault("guard_collectives", lambda: torch.compiler.set_enable_guard_collectives(prior))
        MANAGED.setdefault("guard_collectives", _guard_collectives_enabled)

    def compilation_metrics_limit(self, at_least: int) -> None:
        """Keep at least ``at_least`` compile records (torch's default, 64, loses a long run's)."""
        current = compilation_metrics_limit()
        if current is None or current >= at_least:
            return
        self._undo.setdefault("compilation_metrics_limit", lambda: set_compilation_metrics_limit(current))
        MANAGED.setdefault("compilation_metrics_limit", compilation_metrics_limit)
        set_compilation_metrics_limit(at_least)

    def restore(self) -> None:
        """Put back every setting this owner changed, newest first."""
        for undo in reversed(list(self._undo.values())):
            undo()
        self._undo.clear()


def _set_env(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


def _guard_collectives_enabled() -> bool:
    from torch._C._dynamo.eval_frame import set_guard_complete_hook

    prior = set_guard_complete_hook(None)
    set_guard_complete_hook(prior)
    return prior is not None


def managed_settings() -> dict[str, Any]:
    """The current value of every setting in :data:`MANAGED` (for the no-leak test and debugging)."""
    return {name: read() for name, read in sorted(MANAGED.items())}


def local_source_pattern(local: str, attributes: str = "") -> str:
    """A ``dynamic_sources`` regex for frame local ``local`` (``L['self']``), then ``attributes`` (a regex)."""
    return re.escape(f"L['{local}']") + attributes


def add_dynamic_sources(settings: TorchSettings, patterns: list[str]) -> None:
    """Ints and tensors whose Dynamo source name matches ``patterns`` are dynamic from their first compile."""
    # Else self.global_step would recompile every step.
    prior = str(torch.compiler.config.dynamic_sources)
    entries = [p for p in prior.split(",") if p] + [p for p in patterns if p not in prior.split(",")]
    settings._config("torch.compiler.config", "dynamic_sources", ",".join(entries))


def lift_python_scalars(settings: TorchSettings) -> None:
    """Python numbers stop specialising a compiled frame once they change; ``loss.item()`` stays in the graph."""
    settings.dynamo("allow_unspec_int_on_nn_module", True)
    settings.dynamo("capture_scalar_outputs", True)


def cpu_capability() -> str:
    """The instruction set ATen's CPU kernels use here (``AVX512``, ``AVX2``...)."""
    return str(torch.backends.cpu.get_cpu_capability())


def machine_cache_dir(directory: str) -> str:
    """``directory`` keyed by the CPU instruction set, which Inductor's cache key does not cover: AVX-512 code read
    on the AVX2 path gave NaN losses from the first step (torch 2.13)."""
    return os.path.join(directory, f"cpu-{cpu_capability().lower()}")


AUTO_CHUNKER = "auto_chunker"
"""Inductor's auto-chunker config (torch 2.11+), which the benchmarks measure beside runner's chunked loss."""


def auto_chunker_options(chunks: int | None = None) -> dict[str, Any]:
    """``torch.compile(options=...)`` turning Inductor's auto-chunker on (``chunks``: its chunk count)."""
    options: dict[str, Any] = {f"{AUTO_CHUNKER}.enable": True}
    if chunks is not None:
        options[f"{AUTO_CHUNKER}.num_chunk"] = chunks
    return options
