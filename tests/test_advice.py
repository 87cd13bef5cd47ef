"""runner.telemetry.advice: torch's graph-break and recompile reasons -> a suggested fix (pure)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runner.telemetry.advice import (
    RUNNERS_OPTIMIZER_STEP,
    advice_lines,
    advise,
    graph_break_fix,
    guard_location,
    recompile_fix,
    runners_breaks,
    runners_site,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("reason", "where", "expect"), [
    ("Unsupported Tensor.item() call with capture_scalar_outputs=False", "m.py:3", "keep it a tensor"),
    ("Data-dependent branching", "m.py:9", "torch.where"),
    ("Dynamic shape operator", "m.py:9", "x[mask]"),
    ("Unsupported Tensor.backward() call", "m.py:9", "step_backward"),
    ("setattr() on Tensor.requires_grad", "m.py:9", "toggle_optimizer"),
    ("logging.Logger method not supported for non-export cases", "m.py:9", "self.log"),
    ("Call to `torch._dynamo.graph_break()`", "m.py:9", "explicit graph break"),
    ("Skip calling `torch.compiler.disable()`d function", "m.py:9", "torch.compiler.disable"),
    ("Attempted to inline function marked as skipped", "m.py:9", "cannot trace"),
    ("attempted to trace numpy function with config.trace_numpy=False", "m.py:9", "NumPy"),
    ("something torch has never said", "m.py:9", "fullgraph=true"),
    # where it happened matters more than what: library code reached from the step
    ("Data-dependent branching", "/v/lib/python3.11/site-packages/torchmetrics/aggregation.py:93", "MetricCollection"),
    ("Dynamic shape operator", "torchmetrics/functional/classification/stat_scores.py:320", "register it"),
    ("logging.Logger method not supported", "/v/site-packages/lightning/pytorch/trainer/call.py:210", "hook"),
])
def test_graph_break_fixes(reason: str, where: str, expect: str) -> None:
    assert expect in graph_break_fix(reason, where)


@pytest.mark.parametrize(("reason", "expect"), [
    ("tensor 'batch[0]' size mismatch at index 0. expected 16, actual 8", "drop_last=True"),
    ("tensor 'x' requires_grad mismatch. expected requires_grad=1", "toggle_optimizer"),
    ("GLOBAL_STATE changed: grad_mode ", "no_grad"),
    ("tensor 'x' dtype mismatch. expected Float, actual Half", "cast inputs"),
    ("len(args) == 2  # self.update(*args, **kwargs)  # torchmetrics/metric.py:384 in f", "fixed signature"),
    ("___check_obj_id(optimizer, 1399)", "create it once"),
    ("self._trainer.fit_loop.epoch_loop.batch_progress.is_last_batch == True  # if x:  # m.py:31 in f", "each side"),
    ("self._trainer.fit_loop.epoch_progress.current.completed <= 0  # s = a if e < 1 else 0  # m.py:27 in f",
     "threshold"),
    ("L['self'].lr == 0.001  # y = x * self.lr  # m.py:4 in f", "specialize_float=false"),
    ("L['self'].calls == 7  # self.calls += 1  # m.py:4 in f", "register_buffer"),
    ("something else", "stable"),
])
def test_recompile_fixes(reason: str, expect: str) -> None:
    assert expect in recompile_fix(reason)


SEQ = "0/0: tensor 'batch[0]' size mismatch at index 1. expected 129, actual 118"


def test_a_new_sequence_length_gets_the_fix_for_the_data_at_hand() -> None:
    """Issue 75: a padded instruction run's length change was explained as "often the last, smaller batch ...
    drop_last=True"; its fixes are packing or a shape policy, and drop_last is for a batch size that changes."""
    from runner.telemetry.advice import Batches

    padded = recompile_fix(SEQ, None, Batches(pads_per_batch=True, can_pack=True))
    assert "padded to its longest sequence" in padded and "data.packing=true" in padded
    assert "dynamic=bucket" in padded and "drop_last" not in padded
    classifier = recompile_fix(SEQ, None, Batches(pads_per_batch=True, can_pack=False))
    assert "dynamic=bucket" in classifier and "data.packing" not in classifier
    last = recompile_fix("tensor 'batch[0]' size mismatch at index 0. expected 16, actual 8", None,
                         Batches(pads_per_batch=True, can_pack=True))
    assert "drop_last=True" in last and "data.packing" not in last


@pytest.mark.parametrize(("overrides", "pads", "packs"), [
    (["+recipe=instruct_tiny", "data.packing=false"], True, True),  # a Llama: takes packed rows
    (["+recipe=instruct_tiny"], False, False),  # packed already: one shape
    (["+recipe=instruct_tiny", "data.packing=false", "model.config=gpt2", "model.overrides.intermediate_size=null"],
     True, False),  # GPT-2 cannot take the document mask
    (["+recipe=bert_classify"], True, False),  # a classifier pads per batch and never packs
    (["+recipe=smoke"], False, False),  # fixed windows
])
def test_the_run_tells_the_advice_what_its_batches_are(overrides: list[str], pads: bool, packs: bool) -> None:
    from runner.build import batches_of
    from runner.config import compose, load

    batches = batches_of(load(compose(overrides, run_dir="/tmp/unused")))
    assert (batches.pads_per_batch, batches.can_pack) == (pads, packs)


def test_advise_finds_the_guard_location_and_formats_one_line() -> None:
    reason = "0/3: L['self'].calls == 3  # self.calls += 1  # tests/zoo/m.py:17 in training_step"
    assert guard_location(reason) == "tests/zoo/m.py:17"
    advice = advise("recompile", reason)
    assert advice.where == "tests/zoo/m.py:17" and advice.reason == "0/3: L['self'].calls == 3"
    assert str(advice).startswith("recompile at tests/zoo/m.py:17: 0/3: L['self'].calls == 3. Fix: ")
    brk = advise("graph_break", "Data-dependent branching\n  Explanation: ...", "m.py:5")
    assert str(brk).startswith("graph break at m.py:5: Data-dependent branching. Fix: ")
    with pytest.raises(ValueError):
        advise("other", "x")


_OPTIM = "/v/lib/python3.11/site-packages/torch/optim/optimizer.py:79"
_EXPLICIT = "Call to `torch._dynamo.graph_break()`"


def test_a_break_in_the_optimizer_step_runner_compiled_is_runners() -> None:
    """The same break in torch's optimizer code: the user's to fix when their code called the step inside
    compiled code, runner's (expected, not warned of, still counted) when runner compiled the step."""
    assert "let Lightning step the optimizer" in graph_break_fix(_EXPLICIT, _OPTIM)
    ours = runners_site(_OPTIM)
    assert "nothing to fix" in graph_break_fix(_EXPLICIT, ours) and "Lightning" not in graph_break_fix(_EXPLICIT, ours)
    assert "Expected: " in str(advise("graph_break", _EXPLICIT, ours))
    figures = {"compile/graph_breaks": 2, "compile/graph_break_reasons": [
        {"reason": _EXPLICIT, "user_frame": ours, "count": 1},
        {"reason": "Data-dependent branching", "user_frame": "m.py:5", "count": 1}]}
    assert runners_breaks(figures) == 1
    assert [line.split(":")[0] for line in advice_lines(figures)] == ["graph break at m.py"]


@pytest.mark.slow
def test_compiled_optimizer_step_break_is_reported_as_runners_not_the_users(tmp_path: Path) -> None:
    """A real run: runner compiles AdamW's step (compile.optimizer=compiled), whose ``_use_grad`` calls
    ``torch._dynamo.graph_break()``. It counts as a graph break, labelled as runner's; no warning tells the
    user to let Lightning step the optimizer (which it already does)."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "runner", "+recipe=smoke", "compile.optimizer=compiled",
                           "trainer.max_steps=4", f"hydra.run.dir={run_dir}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["compile/optimizer"] == "compiled" and report["compile/optimizer_compiled_steps"] > 0
    (brk,) = report["compile/graph_break_reasons"]
    assert report["compile/graph_breaks"] == 1 and brk["reason"] == _EXPLICIT
    assert re.search(rf"torch/optim/optimizer\.py:\d+ \({re.escape(RUNNERS_OPTIMIZER_STEP)}\)$", brk["user_frame"]), brk
    assert "nothing to fix" in brk["fix"] and "Lightning" not in brk["fix"]
    output = proc.stdout + proc.stderr
    assert "let Lightning step the optimizer" not in output and "compile: graph break" not in output, output[-3000:]
    assert f"1 (1 {RUNNERS_OPTIMIZER_STEP})" in proc.stdout  # the summary's graph-breaks row
    assert "Expected: torch's optimizer steps break here by design" in (run_dir / "report.md").read_text()
