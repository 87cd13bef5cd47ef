"""What gets compiled (``compile.scope``) and with which ``torch.compile`` arguments.

Decisions are pure functions (``resolve_*``), tested without compiling; ``apply_*`` functions
transform the module in place. Modules are compiled with ``nn.Module.compile()`` (in place), never
wrapped, so ``state_dict`` keys keep their original names (no ``_orig_mod.``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from runner.config.schema import CompileConfig, CudaGraphMode, CudaGraphsConfig, Scope

log = logging.getLogger(__name__)


def resolve_compile_kwargs(cfg: CompileConfig, cudagraphs: CudaGraphsConfig, dynamic: bool | None,
                           device: torch.device) -> dict[str, Any]:
    """Arguments for every ``torch.compile`` call of the run. CUDA graphs become Inductor's
    ``reduce-overhead`` mode only on a CUDA device (elsewhere they are reported inactive)."""
    kwargs: dict[str, Any] = {"backend": cfg.backend, "fullgraph": cfg.fullgraph, "dynamic": dynamic}
    mode = cfg.mode
    if cudagraphs.mode is CudaGraphMode.reduce_overhead and device.type == "cuda":
        mode = "reduce-overhead"
    if mode is not None:
        kwargs["mode"] = mode
    if cfg.options:
        kwargs["options"] = dict(cfg.options)
    return kwargs


def find_blocks(module: nn.Module, block_types: list[str]) -> list[nn.Module]:
    """The repeated blocks ``scope=blocks`` compiles: modules whose class name is in
    ``block_types``, or else the children of the largest ``nn.ModuleList``."""
    if block_types:
        return [m for m in module.modules() if type(m).__name__ in block_types]
    lists = [list(m) for m in module.modules() if isinstance(m, nn.ModuleList)]
    return max(lists, key=len) if lists else []


def compiled_submodules(module: nn.Module) -> list[nn.Module]:
    """For ``scope=model``: the LightningModule's top-level children that hold parameters (a
    ``TrainModule``'s ``model``); compiling them in place compiles every forward the step runs."""
    return [m for m in module.children() if any(True for _ in m.parameters())]


def apply_module_compile(module: nn.Module, scope: Scope, block_types: list[str], kwargs: dict[str, Any]) -> int:
    """Compile the model or its blocks in place. Returns how many modules were compiled."""
    if scope is Scope.model:
        targets = compiled_submodules(module)
    elif scope is Scope.blocks:
        targets = find_blocks(module, block_types)
        if not targets:
            raise ValueError(
                "compile.scope=blocks found no repeated blocks: the model has no nn.ModuleList. Name the "
                "block classes with compile.block_types=[ClassName] or use compile.scope=step."
            )
    else:
        return 0
    for m in targets:
        m.compile(**kwargs)
    return len(targets)


def compile_step(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Callable[..., Any]:
    """``torch.compile`` a training-step function (``scope=step`` / ``step_backward``)."""
    return torch.compile(fn, **kwargs)
