"""Memory: ``memory/*``, the most the run held: its tensors on CUDA, the process on the CPU.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

MEMORY_PEAK_GIB = define("memory/peak_gib", "the most the fit's steps held, from the fit's start (the model's build "
                         "and setup's measurements left out): CUDA: peak allocated by tensors; CPU: the process's peak "
                         "resident set (on Linux; elsewhere from the process's start)", label="peak memory [GiB]")
