"""``benchmarks/families.py`` runs end to end (tiny sizes, ``--quick``, Dynamo's eager backend) and prints and
writes its tables. One family races here, BERT, the classifier (each family is five more processes); the causal
LMs run through the stack in tests/test_hf_stack.py. Structure only: timings are never asserted (the machine is
shared and they drift)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_families_quick_races_each_family_against_lightning_compile(tmp_path: Path) -> None:
    out = tmp_path / "families.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "families.py"), "--quick", "--backend", "eager",
         "--models", "bert", "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path, timeout=900, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Forked from the preloaded server (harness/fork_server.py), whose socket directory is removed at exit without
    # error.
    assert "spawned interpreters" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "## bert: transformers bert" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result["models"]) == {"bert"}
    figs = result["models"]["bert"]["contestants"]
    assert {"lightning", "lightning_compile", "lightning_compile_fused", "hand_loop", "runner_step"} <= set(figs)
    assert set(figs["runner_step"]["ratio"]) >= {"lightning", "lightning_compile"}
    assert any("eval loss" in v for v in result["models"]["bert"]["verdicts"])
