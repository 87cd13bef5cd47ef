"""The child process of ``gpu.py``: runs a list of jobs, writes their figures as JSON as each finishes.

    python benchmarks/gpu_workloads/child.py JOBS_JSON RESULT_PATH SPAWNED_AT

Each job is ``{"call": "module:function", "args": {...}, "env": {...}}``: a function of a module under benchmarks/
(``gpu_workloads.contestant``'s GPT jobs, ``gpu_workloads.jobs``' others), imported when its job comes, with ``env``
set first (a compile cache of its own: Inductor and Triton read those variables at each compile). A job that raises
gets ``{"error": traceback}`` and the next one runs; the first job's result says how long the interpreter took to
get to it, its module's imports (torch, Lightning, runner) included (``startup_s``, from ``SPAWNED_AT``, the
parent's clock). This module imports no torch itself.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a program (common.spawn): benchmarks/ on sys.path in place of this folder,
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # as for the scripts there

from gpu_workloads.results import write_json  # noqa: E402


def _as_if_fresh() -> None:
    """Jobs sharing a process (``--quick``) start as in a fresh one: no compiled code, no cached kernels or memory."""
    import torch

    from runner.torch_internals import runtime

    runtime.reset_compiler()
    runtime.clear_inductor_memory_caches()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run(jobs: list[dict[str, Any]], result: Path, spawned_at: float) -> None:
    """Every job in turn, the results rewritten after each (a kill keeps the finished ones)."""
    out: list[dict[str, Any]] = []
    for i, job in enumerate(jobs):
        os.environ.update(job.get("env", {}))
        module, function = job["call"].split(":")
        started = None
        try:
            call = getattr(importlib.import_module(module), function)
            started = time.time()
            figures = call(**job["args"])
        except Exception:  # the next job still runs; this one's row says why it failed
            figures = {"error": traceback.format_exc()[-3000:]}
        figures["startup_s"] = started - spawned_at if i == 0 and started is not None else None
        out.append(figures)
        write_json(result, out)
        if "torch" in sys.modules:
            _as_if_fresh()


if __name__ == "__main__":
    run(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), float(sys.argv[3]))
