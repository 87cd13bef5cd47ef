"""LoRA and QLoRA runs end to end, in this process (Dynamo's eager backend, seconds each): the optimizer holding the
adapter only, the summary's figures, the adapter read by ``peft.PeftModel.from_pretrained`` with every key and the
trained logits (a causal LM from a saved model, a QLoRA one from its configuration, runner's GPT, a BERT classifier
and its head), the merged export loaded by transformers alone, eval, generate and resume of a LoRA run."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from runner.after.cli import main
from runner.config.decisions.peft import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from runner.peft.nf4 import QLoRALinear
from tests import after_runs
from tests.after_runs import TrainedRun, train
from tests.test_peft import close, ids

LORA = ["peft=lora", "peft.r=4", "peft.alpha=8", "compile=model", "compile.backend=eager", "optimizer.lr=3e-2"]
"""A tiny Llama (2 layers, 7 linears each) with a rank-4 adapter, its forward compiled in place."""
SAVED = ["model=hf_causal_lm", "data=tokenized_text", "data.seq_len=32", "data.batch_size=4", "data.max_bytes=40000",
         *after_runs.FAST]
"""A saved tiny Llama (``model.path``, its own tokenizer): the LoRA run starts from it, and its export records it."""
LAYERS, PER_LAYER = 2, 7


@pytest.fixture(scope="module")
def lora(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    from tests.hf_models import saved_llama

    return train(tmp_path_factory.mktemp("lora") / "run", [*SAVED, f"model.path={saved_llama()}", *LORA])


@pytest.fixture(scope="module")
def qlora(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """The tiny Llama built from its configuration: its export writes the base (dequantized) beside the adapter."""
    return train(tmp_path_factory.mktemp("qlora") / "run", [*after_runs.LLAMA, *LORA, "peft=qlora"])


# -- a LoRA run, end to end -------------------------------------------------------------------------------------
def test_the_optimizer_holds_the_adapter_only_and_the_summary_says_so(lora: TrainedRun) -> None:
    model = lora.module.model
    adapter_params = [p for n, p in model.named_parameters() if ".lora_" in n]
    held = [p for g in lora.module.trainer.optimizers[0].param_groups for p in g["params"]]
    assert {id(p) for p in held} == {id(p) for p in adapter_params}
    f = lora.figures
    trainable = sum(p.numel() for p in adapter_params)
    assert f["peft/method"] == "lora" and f["peft/targets"] == LAYERS * PER_LAYER
    assert f["peft/trainable_params"] == trainable
    assert f["peft/total_params"] == sum(p.numel() for p in model.parameters())
    assert f["peft/optimizer_state_bytes"] == 2 * 4 * trainable + 4 * len(adapter_params)  # AdamW: 2 moments, a step
    assert f["peft/base_weight_bytes"] == 4 * (f["peft/total_params"] - trainable)
    assert any(float(p.detach().abs().max()) > 0 for n, p in model.named_parameters() if ".lora_B" in n)  # it trained


def _logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=x).logits


def hf_peft_package() -> Any:
    """HF's peft (benchmarks/peft.py, on sys.path in a test that ran a benchmark script in this process, is not)."""
    import importlib
    import sys

    found = sys.modules.get("peft")
    if found is not None and "benchmarks" in str(getattr(found, "__file__", "")):
        del sys.modules["peft"]
    return importlib.import_module("peft")


def _peft_model(directory: Path) -> tuple[Any, Any]:
    """peft's model of the adapter in ``directory`` over the base it names; every key matched, or the test fails."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    peft = hf_peft_package()
    PeftModel, set_peft_model_state_dict = peft.PeftModel, peft.utils.set_peft_model_state_dict

    config = json.loads((directory / ADAPTER_CONFIG).read_text())
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], local_files_only=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = PeftModel.from_pretrained(base, str(directory))
    assert not [w for w in caught if "key" in str(w.message).lower()], [str(w.message) for w in caught]
    saved = load_file(str(directory / ADAPTER_WEIGHTS))
    assert saved and not any("_orig_mod" in k for k in saved)
    result = set_peft_model_state_dict(model, saved)  # what peft matched: a missing or unexpected key fails
    assert not result.unexpected_keys and not [k for k in result.missing_keys if "lora_" in k]
    return model, AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], local_files_only=True)


def test_peft_loads_the_adapter_with_every_key_and_computes_the_trained_logits(lora: TrainedRun) -> None:
    from tests.hf_models import saved_llama

    x = ids()
    config = json.loads((lora.run_dir / "model" / ADAPTER_CONFIG).read_text())
    assert config["base_model_name_or_path"] == str(saved_llama().resolve())  # the model the run started from
    assert not (lora.run_dir / "model" / "base").exists()
    peft_model, base = _peft_model(lora.run_dir / "model")
    ours = _logits(lora.module.model.model, x)
    close(_logits(peft_model, x), ours)
    assert float((_logits(base, x) - ours).abs().max()) > 1e-2  # the adapter is not a no-op


def test_the_merged_export_loads_with_transformers_alone(lora: TrainedRun, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    assert main(["export", str(lora.run_dir), "--merge", "--out", str(out)]) == 0
    merged = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True)
    assert not any("lora" in k for k in merged.state_dict())
    close(_logits(merged, ids()), _logits(lora.module.model.model, ids()))
    assert json.loads((out / "runner_export.json").read_text())["merged"] == LAYERS * PER_LAYER


def test_eval_generate_and_resume_work_on_a_lora_run(lora: TrainedRun, capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    import shutil

    from tests.cli import run_cli

    assert main(["eval", str(lora.run_dir), "--out", str(lora.run_dir / "eval_peft.json")]) == 0
    assert json.loads((lora.run_dir / "eval_peft.json").read_text())["eval/loss"] > 0
    capsys.readouterr()
    args = ["--prompt", "def ", "--max-new-tokens", "6", "--seed", "1", "--temperature", "0"]
    assert main(["generate", str(lora.run_dir), *args]) == 0
    from_ckpt = capsys.readouterr().out
    assert main(["generate", str(lora.run_dir / "model"), *args]) == 0  # the adapter export: its base + the adapter
    assert capsys.readouterr().out == from_ckpt
    copy = tmp_path / "run"
    shutil.copytree(lora.run_dir, copy)
    resumed = run_cli("resume", str(copy), "trainer.max_steps=4", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    report = json.loads((copy / "report.json").read_text())
    assert report["run/steps"] == 4 and report["peft/targets"] == LAYERS * PER_LAYER


# -- a QLoRA run ------------------------------------------------------------------------------------------------
def test_qlora_stores_the_base_in_nf4_and_peft_loads_its_adapter_over_the_dequantized_base(qlora: TrainedRun) -> None:
    model = qlora.module.model
    layers = [m for m in model.modules() if isinstance(m, QLoRALinear)]
    assert len(layers) == LAYERS * PER_LAYER
    nf4 = sum(b.numel() * b.element_size() for m in layers for b in m.buffers(recurse=False))
    frozen = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
    f = qlora.figures
    assert f["peft/method"] == "qlora" and f["peft/base_weight_bytes"] == frozen + nf4
    full = sum(4 * m.in_features * m.out_features for m in layers)
    assert nf4 < full / 6  # 4 bits a value and small scales, against float32's 32
    assert f["peft/total_params"] == sum(p.numel() for p in model.parameters()) + sum(
        2 * m.weight_codes.numel() for m in layers)  # an NF4 weight counted by the values it holds
    config = json.loads((qlora.run_dir / "model" / ADAPTER_CONFIG).read_text())
    assert config["base_model_name_or_path"] == str((qlora.run_dir / "model" / "base").resolve())  # written here
    peft_model, _ = _peft_model(qlora.run_dir / "model")
    close(_logits(peft_model, ids()), _logits(model.model, ids()))


def test_merging_a_qlora_run_needs_dequantize_and_then_loads_alone(qlora: TrainedRun, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    assert main(["export", str(qlora.run_dir), "--merge", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "dequantized" in err and "--merge --dequantize" in err and not out.exists()
    assert main(["export", str(qlora.run_dir), "--merge", "--dequantize", "--out", str(out)]) == 0
    merged = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True)
    close(_logits(merged, ids()), _logits(qlora.module.model.model, ids()))


def test_a_gpt_and_a_classifier_run_export_adapters_peft_loads(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """runner's GPT (its tied head left out, its base written as runner's own format) and a BERT classifier (its
    head trained in full: peft's ``modules_to_save``): every key matched, the trained model's outputs."""
    from hydra.utils import instantiate
    from safetensors.torch import load_model
    from transformers import AutoModelForSequenceClassification

    peft = hf_peft_package()
    gpt = train(tmp_path / "gpt", [*after_runs.GPT, "peft=lora", "peft.r=4"])
    base_dir = Path(json.loads((gpt.run_dir / "model" / ADAPTER_CONFIG).read_text())["base_model_name_or_path"])
    base = instantiate(json.loads((base_dir / "config.json").read_text()))
    load_model(base, str(base_dir / "model.safetensors"))
    model = peft.PeftModel.from_pretrained(base, str(gpt.run_dir / "model")).eval()
    x = ids()
    with torch.no_grad():
        close(model(x), gpt.module.model.eval()(x))
    args = ["--prompt", "def ", "--max-new-tokens", "6", "--temperature", "0"]
    capsys.readouterr()  # the training's summaries
    assert main(["generate", str(gpt.run_dir), *args]) == 0
    from_ckpt = capsys.readouterr().out
    assert main(["generate", str(gpt.run_dir / "model"), *args]) == 0  # runner's own base format + the adapter
    assert capsys.readouterr().out == from_ckpt

    bert = train(tmp_path / "bert", [*after_runs.bert(after_runs.labelled_jsonl(tmp_path / "train.jsonl")),
                                     "peft=lora", "peft.r=4", "optimizer.lr=3e-2"])
    out = bert.run_dir / "model"
    config = json.loads((out / ADAPTER_CONFIG).read_text())
    assert config["task_type"] == "SEQ_CLS" and config["modules_to_save"] == ["classifier"]
    hf = AutoModelForSequenceClassification.from_pretrained(config["base_model_name_or_path"])
    classifier = peft.PeftModel.from_pretrained(hf, str(out)).eval()
    result = peft.utils.set_peft_model_state_dict(classifier, load_file_of(out))
    assert not result.unexpected_keys
    batch = {"input_ids": ids() % 100 + 1, "attention_mask": torch.ones(2, 16, dtype=torch.long)}
    with torch.no_grad():
        close(classifier(**batch).logits, bert.module.model.eval()(batch))


def load_file_of(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / ADAPTER_WEIGHTS))


