"""Packed rows where processes are the point: under DDP (gloo, 2 CPU processes) every rank trains its own packs,
all of one shape, compiles one graph, and the ranks stay in sync; and the compile process beside the run compiles
the packed step the run switches to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_each_rank_trains_its_own_packs_of_one_shape(tmp_path: Path) -> None:
    """... from one preparation: local rank 0 tokenizes and packs, rank 1 waits for it and maps the same files,
    whose pages the two processes share."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "tests.ddp_packing_fit"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")).removeprefix("RESULT "))
    first, second = result["ranks"]
    assert result["steps"] == 12 and len(first["rows"]) == len(second["rows"]) == 24
    assert not set(first["rows"]) & set(second["rows"])  # the sampler gave each rank packs of its own
    assert first["shapes"] == second["shapes"] == [[2, 128]]  # one shape on both ranks: nothing to agree on
    assert first["graphs"] == second["graphs"] == 1
    assert first["checksum"] == pytest.approx(second["checksum"], rel=1e-6)
    assert (first["prepared"], second["prepared"]) == (True, False) and first["store"] == second["store"]
    assert first["shared_kb"] > 0 and second["shared_kb"] > 0


@pytest.mark.slow
def test_packed_rows_compile_beside_the_run_and_switch(tmp_path: Path) -> None:
    """The compile process beside the run gets the first packed batch (``PackedInputs`` pickled across) and
    compiles the step the run then switches to: one graph, no recompile."""
    from runner.config import compose, load
    from runner.run import run
    from tests.test_background_compile import WaitForTheProcess

    shipped = ROOT / "examples" / "data" / "instruct.jsonl"
    cfg = load(compose(["model=gpt_tiny", "data=instruct", f"data.path={shipped}", "data.seq_len=128",
                        "data.batch_size=4", "data.max_examples=200", "data.packing=true", "compile.backend=aot_eager",
                        "compile.background=shared", "trainer.max_steps=8", "trainer.val_check_interval=8",
                        "trainer.limit_val_batches=1", "telemetry.speedup_steps=0",
                        "trainer.enable_progress_bar=false"],
                       run_dir=str(tmp_path)))
    figures = run(cfg, extra_callbacks=[WaitForTheProcess(at=2)]).figures
    assert figures["compile/background_outcome"] == "switched at step 3"
    assert figures["dynamic/recompiles"] == 0 and figures["dynamic/graphs"] == 1
