"""DDP on CPU (gloo, 2 processes) with compilation on: ranks stay identical and training finishes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config.schema import Scope

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("scope", [Scope.step, Scope.blocks])
def test_ddp_two_cpu_processes_stay_in_sync(scope: Scope) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "tests.ddp_fit", scope.value], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    (sum0, abs0, graphs0), (sum1, abs1, graphs1) = result["checksums"]
    assert result["steps"] == 10
    # DDP keeps the ranks' weights identical: every rank gets the same all-reduced bits and runs the same kernels on
    # them, so the checksums agree to the bit (a tolerance would hide a rank that drifted by one update).
    assert (sum0, abs0) == (sum1, abs1)
    assert graphs0 == graphs1 >= 1  # both ranks compiled, and compiled the same number of graphs
    # The strategy destroys the gloo group at exit on both ranks (left alive, it can abort the process).
    exits = sorted(re.findall(r"EXIT rank=(\d) group_left=(\w+)", proc.stdout))
    assert exits == [("0", "False"), ("1", "False")], proc.stdout[-2000:]
