"""Preference tuning end to end, in this process (``aot_eager``, a one-layer model, a few steps): the shipped recipe's
DPO with a LoRA adapter compiles its whole step, policy and reference, into one graph with no recompile; TRL's
figures reach every logger, the summary and report.json; the adapter loads in HF peft; ``runner eval`` gives the
preference accuracy over every validation pair; a resume goes on. Then precomputed reference log-probabilities
(computed once, read by the next run) and padded pairs of varying lengths with no recompile after warm-up; and, in
real processes, docs/preference.md's two ways from an SFT run to DPO, as the page writes them."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from runner.metrics import TRAIN_METRICS, VAL_METRICS
from runner.training.reference import AdapterReference, FrozenCopy
from tests.after_runs import FAST, TrainedRun, train

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "examples" / "data" / "preference.jsonl"
TINY = ["model.overrides.hidden_size=32", "model.overrides.intermediate_size=64", "model.overrides.num_hidden_layers=1",
        "model.overrides.num_attention_heads=2"]
RECIPE = ["+recipe=llama_dpo", f"data.path={SHIPPED}", "compile.backend=aot_eager", "data.max_examples=200", *TINY,
          *FAST, "trainer.checkpoint_every_n_steps=3"]
"""The documented command, shortened: 200 pairs, a one-layer model, a few steps, aot_eager."""


@pytest.fixture(scope="module")
def dpo(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    return train(tmp_path_factory.mktemp("dpo") / "run", [*RECIPE, "logger=tensorboard", "trainer.log_every_n_steps=1"])


def test_the_recipe_compiles_policy_and_reference_into_one_graph(dpo: TrainedRun) -> None:
    f = dpo.figures
    assert f["objective/loss"] == "dpo" and f["objective/reference"] == AdapterReference.describe
    assert f["dynamic/graphs"] == 1 and f["dynamic/recompiles"] == 0 and f["compile/graph_breaks"] == 0
    assert f["run/steps"] == 3 and 0 < f["train/loss"] < 2
    model = dpo.module.model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)  # only the adapter trained


def test_trl_figures_reach_every_logger_the_summary_and_report_json(dpo: TrainedRun) -> None:
    report = json.loads((dpo.run_dir / "report.json").read_text())
    for key in (*TRAIN_METRICS, *VAL_METRICS):
        assert isinstance(report[key], float), key
    assert 0 <= report["val/rewards/accuracies"] <= 1
    assert "val rewards/accuracies" in (dpo.run_dir / "report.md").read_text()
    header = (dpo.run_dir / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"rewards/accuracies", "rewards/margins", "val/rewards/accuracies", "logps/chosen"} <= set(header)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((dpo.run_dir / "tensorboard").rglob("events.out.tfevents.*")).parent))
    events.Reload()
    assert {"rewards/chosen", "rewards/accuracies", "val/rewards/accuracies"} <= set(events.Tags()["scalars"])


def test_peft_loads_the_dpo_adapter_with_every_key(dpo: TrainedRun) -> None:
    from tests.test_peft import close, ids
    from tests.test_peft_runs import _logits, _peft_model

    peft_model, base = _peft_model(dpo.run_dir / "model")
    ours = _logits(dpo.module.model.model, ids())
    close(_logits(peft_model, ids()), ours)
    assert float((_logits(base, ids()) - ours).abs().max()) > 0  # the adapter trained: not the base


def test_eval_scores_every_validation_pair_and_a_resume_goes_on(dpo: TrainedRun, tmp_path: Path) -> None:
    import shutil

    from runner.after.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["eval", str(dpo.run_dir)]) == 0
    evaluated = json.loads((dpo.run_dir / "eval.json").read_text())
    assert evaluated["eval/pairs"] == len(dpo.module.trainer.datamodule.datasets["val"].fitted)  # all, not 1 batch
    assert 0 <= evaluated["eval/rewards/accuracies"] <= 1
    copy = tmp_path / "run"
    shutil.copytree(dpo.run_dir, copy)
    resumed = train(copy, [*RECIPE, "ckpt_path=last", "trainer.max_steps=5"])
    assert resumed.figures["run/steps"] == 5 and isinstance(resumed.figures["rewards/accuracies"], float)
    assert min(s["step"] for s in resumed.figures["perf/step_series"]) == 3  # on from the checkpoint's step


def test_precomputed_reference_is_computed_once_and_read_by_the_next_run(tmp_path: Path) -> None:
    """A full fine-tune (``peft=none``) with ``objective.reference=precompute``: the first run's pass writes the
    cache; a second run of the same config reads it and runs no reference forward; its losses match a frozen copy's."""
    common = [*RECIPE, "peft=none", "compile=eager", f"objective.cache_dir={tmp_path / 'cache'}"]
    first = train(tmp_path / "first", [*common, "objective.reference=precompute"]).figures
    second = train(tmp_path / "second", [*common, "objective.reference=precompute"]).figures
    copied = train(tmp_path / "copy", [*common, "objective.reference=copy"]).figures
    assert first["objective/reference_cache"].count("computed: ") == 2  # training and validation pairs
    read = second["objective/reference_cache"]
    assert read.count("read: ") == 2 and "computed: " not in read
    assert copied["objective/reference_bytes"] > 0
    # The same reference (the model as built, eval mode either way: no dropout) gives the same losses.
    for key in ("train/loss", "val/loss"):
        assert first[key] == pytest.approx(copied[key], rel=1e-4), key


def test_padded_pairs_of_varying_length_compile_once(tmp_path: Path) -> None:
    """Unpacked pairs padded per batch under ``dynamic=dynamic``: one graph for every length, and a recompile after
    warm-up would fail the run."""
    f = train(tmp_path / "run", [*RECIPE, "data.packing=false", "dynamic=dynamic", "dynamic.warmup_steps=1",
                                 "dynamic.after_warmup=fail_on_recompile", "trainer.max_steps=5"]).figures
    assert f["dynamic/graphs"] == 1 and f["dynamic/recompiles"] == 0 and f["run/steps"] == 5
    assert torch.isfinite(torch.tensor(f["train/loss"]))


def test_compiled_in_place_the_reference_is_the_graph_without_gradients(tmp_path: Path) -> None:
    """``compile.scope=model``: the model is compiled in place, called for the policy (with gradients) and the
    reference (without): two graphs, told apart by the grad mode alone (validation's graph), none by the adapter's
    state: the gate is a tensor, not a guard."""
    overrides = [*RECIPE, "compile=model", "trainer.max_steps=4", "trainer.val_check_interval=2"]
    f = train(tmp_path / "run", overrides).figures
    reasons = f["dynamic/recompile_reasons"]
    assert f["dynamic/graphs"] == 2 and reasons and all("grad_mode" in r for r in reasons), reasons


SHORT = ["trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.limit_val_batches=1",
         "trainer.checkpoint_every_n_steps=2", "trainer.log_every_n_steps=1", "telemetry.log_every_n_steps=1",
         "telemetry.speedup_steps=0", "compile=eager", "compile.background=disabled"]
"""What the test adds to each of the page's training commands: two steps, nothing compiled."""


def _sft_to_dpo_commands() -> list[str]:
    """The shell lines of docs/preference.md's "From SFT to DPO" block, comments left out."""
    section = (ROOT / "docs" / "preference.md").read_text().split("## From SFT to DPO", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split(" #", 1)[0].strip() for line in block.splitlines() if not line.startswith("#")]


@pytest.mark.slow
def test_sft_then_dpo_both_ways_as_the_docs_write_them(tmp_path: Path) -> None:
    """SFT with LoRA, then DPO from its merged export and from its adapter, run as docs/preference.md writes them
    (from a checkout's directory: the shipped data under examples/), each training command two steps long: every
    command exits 0, each DPO run's reference is the one the page names, and at the first step it is the SFT model
    itself (the policy starts there: every reward margin 0), so the page's overrides compose and mean what it says."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # the recipes' data.path, relative to a checkout
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline"}
    sft, reports = "", []
    for line in _sft_to_dpo_commands():
        if line.startswith("SFT="):  # the page's own shell line finds the SFT run
            sft = subprocess.run(["bash", "-c", f'{line}; echo "$SFT"'], cwd=tmp_path, capture_output=True,
                                 text=True, check=True).stdout.strip()
            continue
        args = shlex.split(line.replace("$SFT", sft))
        assert args[0] == ".venv/bin/python" and args[1:3] == ["-m", "runner"], line
        train = args[3].startswith("+recipe=")
        done = subprocess.run([sys.executable, *args[1:], *(SHORT if train else [])], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
        if train and "llama_dpo" in args[3]:
            run_dir = max((tmp_path / "outputs").glob("*/*-llama_dpo"), key=lambda p: p.stat().st_mtime)
            reports.append((run_dir, json.loads((run_dir / "report.json").read_text())))
    assert sft and len(reports) == 2
    (merged_dir, merged), (adapter_dir, adapter) = reports
    assert merged["objective/reference"] == AdapterReference.describe and "objective/reference_bytes" not in merged
    assert adapter["objective/reference"] == FrozenCopy.describe
    assert adapter["objective/reference_bytes"] >= 4 * adapter["peft/total_params"]  # the whole model, float32
    for run_dir in (merged_dir, adapter_dir):
        rows = [r for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open()) if r.get("rewards/margins")]
        assert rows and float(rows[0]["rewards/margins"]) == pytest.approx(0.0, abs=1e-6), run_dir
