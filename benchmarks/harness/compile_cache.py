"""Cold vs warm compile time: the same runner job in separate processes.

1. cold: a fresh, empty ``TORCHINDUCTOR_CACHE_DIR``; at the end the process saves
   ``torch.compiler.save_cache_artifacts()`` to a file (the portable "mega-cache").
2. warm: the same cache directory again (Inductor FX-graph and AOTAutograd caches on disk).
3. artifacts: another fresh, empty cache directory, but ``torch.compiler.load_cache_artifacts()``
   of the file from (1) first: what another machine or rank gets when the file is carried over.

Compile time is the first step's wall time minus the steady-state median step (Dynamo tracing is
never cached, so it is part of every figure). Process start-up, imports and data loading are not.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]


def child(workload: Any, scope: Any, backend: str, steps: int, save: str | None, load: str | None) -> dict[str, Any]:
    """Run in the child process: train ``steps`` steps of runner, return compile figures."""
    import torch
    from contestants.compare import Contestant, Pacer, run_runner

    loaded = None
    if load:
        info = torch.compiler.load_cache_artifacts(Path(load).read_bytes())
        loaded = None if info is None else {kind: len(keys) for kind, keys in info.artifacts.items()}
    pacer = Pacer(quota=10**9, left=10**9)
    run_runner(Contestant("runner", "runner", run_runner, {"scope": scope, "backend": backend}), workload, steps,
               pacer)
    out: dict[str, Any] = {
        "first_step_s": pacer.times[0],
        "steady_ms": 1e3 * statistics.median(pacer.times[2:]),
        "loaded_artifacts": loaded,
    }
    out["compile_s"] = out["first_step_s"] - out["steady_ms"] / 1e3
    if save:
        saved = torch.compiler.save_cache_artifacts()
        Path(save).write_bytes(saved[0] if saved else b"")
        out["artifact_bytes"] = len(saved[0]) if saved else 0
        out["saved_artifacts"] = {kind: len(keys) for kind, keys in saved[1].artifacts.items()} if saved else {}
    return out


def _spawn(argv: list[str], cache_dir: str, extra: list[str]) -> dict[str, Any]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir}
    cmd = [sys.executable, str(BENCHMARKS / "compare.py"), *argv, "--cache-child", *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"cache run failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cold_warm(argv: list[str]) -> dict[str, Any]:
    """Parent side: the three runs above, each in its own process."""
    root = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    artifacts = root / "artifacts.bin"
    cold = _spawn(argv, str(root / "cache"), ["--save-artifacts", str(artifacts)])
    warm = _spawn(argv, str(root / "cache"), [])
    carried = _spawn(argv, str(root / "cache_fresh"), ["--load-artifacts", str(artifacts)])
    return {
        "cold": cold,
        "warm": warm,
        "artifacts": carried,
        "warm_over_cold": warm["compile_s"] / cold["compile_s"] if cold["compile_s"] > 0 else None,
        "artifacts_over_cold": carried["compile_s"] / cold["compile_s"] if cold["compile_s"] > 0 else None,
    }
