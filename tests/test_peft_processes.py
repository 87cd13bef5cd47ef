"""What needs a process or a real Inductor compile: ``+recipe=llama_lora`` on 2 ranks with DDP (LoRA) and with FSDP2
(QLoRA: each block holds frozen, trainable and NF4 tensors), QLoRA with checkpointing and adapter dropout compiled
by Inductor in a compile process beside the run (``compile.background=shared``), which the run switches to, and
``benchmarks/lora_qlora.py --quick``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_peft_runs import _peft_model

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TINY = ["+recipe=llama_lora", "data.max_bytes=200000", "model.overrides.num_hidden_layers=2", "trainer.max_steps=4",
        "trainer.val_check_interval=4", "trainer.limit_val_batches=1", "telemetry.speedup_steps=0",
        "trainer.enable_progress_bar=false", "after.sample_tokens=0", "compile.backend=eager"]
LAYERS = 2


def figures(run_dir: Path) -> dict[str, Any]:
    report = json.loads((run_dir / "report.json").read_text())
    return dict(report.get("figures", report))


def only_the_adapter_trained(f: dict[str, Any]) -> None:
    """No break; recompiles only in the first step (validation under no_grad first; the first block's input that
    requires no grad, the embedding being frozen); the optimizer's state is the adapter's (AdamW: two moments and a
    step per tensor, two tensors per adapted linear)."""
    assert f["compile/graph_breaks"] == 0 and not f["compile/recompile_limit_hits"]
    assert all(r["step"] == 0 for r in f["compile/recompile_reasons"]), f["compile/recompile_reasons"]
    assert f["peft/targets"] == 7 * LAYERS
    assert f["peft/optimizer_state_bytes"] == 8 * f["peft/trainable_params"] + 4 * 2 * f["peft/targets"]


@pytest.mark.parametrize(("distributed", "method"), [("ddp", "lora"), ("fsdp", "qlora")])
def test_an_adapter_trains_on_two_ranks_and_loads_in_peft(distributed: str, method: str, tmp_path: Path) -> None:
    """DDP with LoRA; FSDP2 with QLoRA: each block holds frozen weights (norms), trainable ones (the adapter) and
    NF4 buffers, which FSDP2 leaves whole on every rank."""
    run_dir = tmp_path / "run"
    parallel = ["trainer=fsdp", "compile=blocks"] if distributed == "fsdp" else ["trainer.devices=2"]
    proc = subprocess.run([sys.executable, "-m", "runner", *TINY, *parallel, f"peft={method}",
                           f"hydra.run.dir={run_dir}"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    f = figures(run_dir)
    assert f["peft/method"] == method
    only_the_adapter_trained(f)
    if distributed == "fsdp":  # the whole model is in the consolidated checkpoint, exported after the fit
        from runner.after.cli import main

        assert main(["export", str(run_dir), "--ckpt", "checkpoints/consolidated.pt"]) == 0
    _peft_model(run_dir / "model")  # every key, as peft matches them


def test_qlora_with_checkpointing_and_dropout_compiles_beside_the_run_with_inductor(tmp_path: Path) -> None:
    from runner.config import compose, load
    from runner.run import run
    from tests.test_background_compile import WaitForTheProcess

    overrides = [*TINY, "peft=qlora", "peft.dropout=0.1", "offload=checkpoint", "offload.measure=false",
                 "compile.backend=inductor", "compile.background=shared", "trainer.max_steps=8",
                 "trainer.val_check_interval=8", "model.overrides.num_hidden_layers=1"]
    cfg = load(compose(overrides, run_dir=str(tmp_path)))
    f = run(cfg, extra_callbacks=[WaitForTheProcess(at=2)]).figures  # the run waits for the process at step 2
    assert f["peft/method"] == "qlora" and f["compile/graph_breaks"] == 0 and not f["compile/recompile_limit_hits"]
    assert f["compile/background_outcome"] == "switched at step 3", f["compile/background_outcome"]
    assert all(r["step"] <= 3 for r in f["compile/recompile_reasons"]), f["compile/recompile_reasons"]


def test_the_benchmarks_quick_run_races_every_contestant(tmp_path: Path) -> None:
    """``benchmarks/lora_qlora.py --quick``: every contestant in its own process, the figures beside each step time."""
    out = tmp_path / "peft.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lora_qlora.py"), "--quick", "--out", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    figs = result["contestants"]
    assert list(figs) == ["lightning", "lightning_peft", "lightning_peft_compile", "runner_full", "runner_lora",
                          "runner_qlora"]
    for name in ("runner_full", "runner_lora", "runner_qlora"):
        assert figs[name]["measured"]["graph_breaks"] == 0 and figs[name]["measured"]["recompiles"] == 0, name
    lora, full = figs["runner_lora"]["measured"], figs["runner_full"]["measured"]
    assert lora["trainable_params"] == figs["lightning_peft"]["measured"]["trainable_params"]  # the same adapter
    assert lora["optimizer_state_bytes"] < full["optimizer_state_bytes"]
    assert len(result["targets"]) == 3 and "| runner peft=qlora |" in proc.stdout
