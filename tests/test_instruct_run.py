"""Instruction tuning end to end, in this process: the shipped recipe on the shipped file with the loss on the
answers only (counted from the file itself), packed rows through every compile scope, shape policy and
saved-activation strategy with one graph and no recompile, then ``runner eval`` and ``runner generate`` (in the
run's prompt template) on the result."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from runner.data.instruct.formats import PAIR_TEMPLATE
from tests.after_runs import FAST, train

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "examples" / "data" / "instruct.jsonl"
RECIPE = ["+recipe=instruct_tiny", f"data.path={SHIPPED}", "compile.backend=aot_eager", "data.max_examples=300",
          "model.overrides.hidden_size=32", "model.overrides.intermediate_size=64",
          "model.overrides.num_hidden_layers=1", "model.overrides.num_attention_heads=2", *FAST]
"""The documented command, shortened: 300 examples, a one-layer model, a few steps, aot_eager."""
GPT = ["model=gpt_tiny", "data=instruct", f"data.path={SHIPPED}", "data.seq_len=128", "data.batch_size=4",
       "data.max_examples=200", "data.packing=true", "compile.backend=aot_eager", *FAST]


def test_the_shipped_recipe_trains_on_the_answers_only(tmp_path: Path) -> None:
    trained = train(tmp_path / "run", RECIPE)
    figures = trained.figures
    rows = [json.loads(line) for line in SHIPPED.read_text().splitlines()[:300]]
    # Byte-level: each answer's bytes and its EOS are in the loss; every prompt (in its template) is not.
    assert figures["data/loss_tokens"] == sum(len(r["response"].encode()) + 1 for r in rows)
    assert figures["data/prompt_tokens"] == sum(len(PAIR_TEMPLATE.replace("{prompt}", r["prompt"]).encode())
                                                   for r in rows)
    assert figures["data/examples"] == 300 and "data/truncated_rows" in figures
    # Examples of 60-175 bytes in rows of 512: 4-5 a row; 300 of them leave the last rows part-empty.
    assert figures["data/truncated_rows"] == 0 and figures["data/packing_padding_pct"] < 10
    assert figures["dynamic/recompiles"] == 0 and figures["dynamic/graphs"] == 1
    assert figures["data/batch_shape"] == "[4, 512] every batch (packed rows)"
    report = (trained.run_dir / "report.md").read_text()
    assert "packed rows" in report and "tokens in the loss" in report
    # The sample at the end asks the recipe's question in the prompt template.
    assert "### Instruction:\nWhat is 12 + 30?\n\n### Response:\n" in figures["run/sample"]

    from runner.after.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["generate", str(trained.run_dir), "--prompt", "Reverse the word \"river\".",
                     "--max-new-tokens", "12", "--temperature", "0"]) == 0
    assert out.getvalue().startswith(PAIR_TEMPLATE.replace("{prompt}", "Reverse the word \"river\"."))
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["eval", str(trained.run_dir)]) == 0
    evaluated = json.loads((trained.run_dir / "eval.json").read_text())
    from runner.data.splits import split_documents

    val = split_documents(300, 0.1, 0).val  # the run's seeded split by row (data.val_fraction, data.seed)
    assert evaluated["eval/tokens"] == sum(len(rows[i]["response"].encode()) + 1 for i in val)  # the answers only
    assert evaluated["eval/loss"] > 0


@pytest.mark.parametrize("overrides", [
    ["compile=model"], ["compile=blocks", "dynamic=unbacked"], ["compile=step_backward", "dynamic=dynamic"],
    ["compile=step", "dynamic=bucket", "offload=bf16"], ["compile=step", "dynamic=static", "offload=checkpoint"]],
    ids=["model", "blocks-unbacked", "step_backward-dynamic", "bucket-bf16", "static-checkpoint"])
def test_packed_rows_through_the_stack_compile_once(overrides: list[str], tmp_path: Path) -> None:
    figures = train(tmp_path / "run", [*GPT, "trainer.max_steps=4", *overrides]).figures
    # compile=model and blocks compile modules that validation (no grad) calls too: a grad-mode recompile, packing
    # or not. No recompile for a shape.
    reasons = [r for r in figures["dynamic/recompile_reasons"] if "grad_mode" not in r]
    modules = overrides[0] in ("compile=model", "compile=blocks")
    assert reasons == [] and figures["dynamic/recompiles"] <= (1 if modules else 0), reasons
    assert figures["run/steps"] == 4 and figures["train/loss"] > 0
    assert figures["data/batch_shape"] == "[4, 128] every batch (packed rows)"
    assert figures["dynamic/padding_waste_pct"] is None or figures["dynamic/padding_waste_pct"] < 10


def test_text_documents_pack_too(tmp_path: Path) -> None:
    figures = train(tmp_path / "run", ["+recipe=smoke", "data=text_documents", "data.seq_len=64",
                                       "data.max_bytes=40000", "data.packing=true", "compile.backend=aot_eager",
                                       *FAST]).figures
    assert figures["dynamic/recompiles"] == 0 and figures["dynamic/graphs"] == 1
    assert figures["data/packing_padding_pct"] < 5 and figures["data/packs"] == figures[
        "data/train_sequences"]


def test_lora_trains_packed_instruction_data_through_one_graph(tmp_path: Path) -> None:
    """``+recipe=instruct_lora`` (issue 70 meets 71): packed rows of the shipped file with the loss on the answers,
    an adapter on every linear, one graph, no recompile, no graph break; the base stays as it was built and the
    run's ``model/`` is the adapter in peft's format."""
    import torch
    from safetensors.torch import load_file


    lora = ["+recipe=instruct_lora", *RECIPE[1:]]
    trained = train(tmp_path / "run", lora)
    figures = trained.figures
    rows = [json.loads(line) for line in SHIPPED.read_text().splitlines()[:300]]
    assert figures["data/loss_tokens"] == sum(len(r["response"].encode()) + 1 for r in rows)
    assert figures["dynamic/recompiles"] == 0 and figures["dynamic/graphs"] == 1
    assert figures["compile/graph_breaks"] == 0
    assert figures["peft/method"] == "lora" and 0 < figures["peft/trainable_params"] < figures["peft/total_params"]
    model = trained.module.model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)  # only the adapter trained
    adapter = load_file(str(trained.run_dir / "model" / "adapter_model.safetensors"))
    assert adapter and all(k.startswith("base_model.model.") and "_orig_mod" not in k for k in adapter)
    assert any(float(t.abs().max()) > 0 for k, t in adapter.items() if "lora_B" in k)  # trained: not a no-op
    assert all(torch.isfinite(t).all() for t in adapter.values())
