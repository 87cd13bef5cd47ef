"""After training: every export loads with its family's own library and computes what the trained module computes,
bit for bit on the CPU (the same model class with the weights copied runs the same kernels on the same inputs);
``runner eval`` scores a checkpoint; ``runner generate`` writes text, both families on their KV cache (one new
token per model call after the prompt, the tokens of uncached greedy decoding); the end-of-fit sample; and the bad
inputs, each refused in one paragraph with nothing written.

One tiny run per family (a few steps, no compile codegen) is trained in-process once for the module and read by
every test (tests/after_runs.py); timm's export is tested where timm imports (the versions job's venv)."""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from runner.after.at_end import at_end_of_fit
from runner.after.cli import main
from runner.after.export import CONFIG, METADATA, WEIGHTS
from runner.after.generate import Sampling, generate_ids
from runner.after.source import open_trained
from runner.data.sequences.padding import IGNORE_INDEX
from runner.models.gpt import GPT
from tests import after_runs
from tests.after_runs import TrainedRun, train
from tests.hf_models import save_model, vision_imports

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpt(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    return train(tmp_path_factory.mktemp("gpt") / "run", after_runs.GPT)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    return train(tmp_path_factory.mktemp("llama") / "run", after_runs.LLAMA)


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    base = tmp_path_factory.mktemp("bert")
    return train(base / "run", after_runs.bert(after_runs.labelled_jsonl(base / "train.jsonl")))


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """A saved Llama with its own byte-level BPE tokenizer (320 ids), loaded from ``model.path``: not bytes."""
    base = tmp_path_factory.mktemp("bpe")
    saved = save_model(base / "saved")
    return train(base / "run", ["model=hf_causal_lm", f"model.path={saved}", "compile=eager", "data.seq_len=32",
                                "data.batch_size=4", "data.max_bytes=40000", *after_runs.FAST])


def _listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def _refused(args: list[str], capsys: pytest.CaptureFixture[str], *fragments: str) -> str:
    """``main(args)`` exits 2 with one paragraph on stderr holding every fragment."""
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"runner {args[0]}: "), err
    for fragment in fragments:
        assert fragment in err, err
    return err


# -- export -----------------------------------------------------------------------------------------------
def test_gpt_export_rebuilds_from_its_config_and_computes_what_the_trained_module_computes(gpt: TrainedRun) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_model

    from runner.models.gpt import GPT

    out = gpt.run_dir / "model"
    assert gpt.figures["run/export"] == str(out)
    config = json.loads((out / CONFIG).read_text())
    assert config.pop("_target_") == "runner.models.gpt.GPT"
    exported = GPT(**config)
    load_model(exported, str(out / WEIGHTS))
    with safe_open(str(out / WEIGHTS), "pt") as f:  # compile=model ran: no wrapper or hook in what was saved
        keys = list(f.keys())  # noqa: SIM118 - a safetensors file is no dict
    assert keys and not [k for k in keys if "_orig_mod" in k or "_checkpoint_wrapped" in k]
    x = torch.randint(0, 256, (2, 16))
    trained = gpt.module.model.eval()
    assert torch.equal(exported.eval()(x), trained(x))
    assert "byte-level" in json.loads((out / METADATA).read_text())["tokenizer"]


def test_a_wrapped_module_is_exported_without_its_wrapper(gpt: TrainedRun, tmp_path: Path) -> None:
    """torch.compile's wrapper puts ``_orig_mod.`` in every key: the export rebuilds the model, saves plain keys."""
    from safetensors.torch import load_file

    from runner.after.export import export_model

    trained = open_trained(gpt.run_dir)
    wrapped = torch.compile(trained.model, backend="eager")  # nothing compiles until it is called
    assert all(k.startswith("_orig_mod.") for k in wrapped.state_dict())
    export_model(wrapped, trained.cfg, gpt.run_dir, tmp_path / "out", None, None)
    saved = load_file(str(tmp_path / "out" / WEIGHTS))
    plain = trained.model.state_dict()
    assert saved.keys() <= plain.keys() and all(torch.equal(saved[k], plain[k]) for k in saved)


def test_transformers_causal_lm_export_loads_with_auto_model(llama: TrainedRun) -> None:
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(str(llama.run_dir / "model"), local_files_only=True)
    x = torch.randint(0, 256, (2, 16))
    trained = llama.module.model.model.eval()
    assert torch.equal(exported.eval()(input_ids=x).logits, trained(input_ids=x).logits)
    assert (llama.run_dir / "model" / "model.safetensors").is_file()


def test_classifier_export_carries_its_labels_and_loads_with_auto_model(bert: TrainedRun, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoModelForSequenceClassification

    run_dir = bert.run_dir
    names = sorted(after_runs.CLASSES)  # the data module's label map, written beside the run (labels.json)
    written = json.loads((run_dir / "labels.json").read_text())
    assert written["id2label"] == {str(i): n for i, n in enumerate(names)}
    # the end-of-fit export and an export of the checkpoint both carry the names, not bare ids
    assert json.loads((run_dir / "model" / "config.json").read_text())["id2label"] == written["id2label"]
    assert main(["export", str(run_dir), "--out", str(tmp_path / "out")]) == 0
    assert "runner export: " in capsys.readouterr().out
    exported = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "out"), local_files_only=True)
    assert exported.config.id2label == dict(enumerate(names)) and exported.config.label2id["gamma"] == 3
    batch = {"input_ids": torch.randint(1, 257, (3, 12)), "attention_mask": torch.ones(3, 12, dtype=torch.long)}
    trained = bert.module.model.eval()
    assert torch.equal(exported.eval()(**batch).logits, trained(batch))


def test_export_from_a_checkpoint_equals_the_end_of_fit_export_and_replaces_only_with_force(
        gpt: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from safetensors.torch import load_file

    out = tmp_path / "exported"
    assert main(["export", str(gpt.run_dir), "--out", str(out)]) == 0
    again, at_end = load_file(str(out / WEIGHTS)), load_file(str(gpt.run_dir / "model" / WEIGHTS))
    assert again.keys() == at_end.keys() and all(torch.equal(again[k], at_end[k]) for k in again)
    before = _listing(out)
    _refused(["export", str(gpt.run_dir), "--out", str(out)], capsys, str(out), "not empty", "--force")
    assert _listing(out) == before
    (out / "stray.txt").write_text("x")
    assert main(["export", str(gpt.run_dir), "--out", str(out), "--force"]) == 0
    assert not (out / "stray.txt").exists() and (out / WEIGHTS).is_file()
    assert not list(tmp_path.glob(".exported.*"))  # the temporary and the replaced directory are gone


@pytest.mark.skipif(not vision_imports(), reason="timm does not import beside this torch (a CPU-only torch has no "
                                                 "torchvision on PyPI): the versions job runs it on PyPI's torch 2.15")
def test_timm_export_loads_with_create_model_and_load_state_dict(tmp_path: Path) -> None:
    import timm
    from safetensors.torch import load_file

    trained = train(tmp_path / "run", ["+recipe=resnet_tiny", "compile=eager", "data.image_size=32",
                                       "data.num_samples=64", "data.batch_size=8", *after_runs.FAST])
    out = tmp_path / "run" / "model"
    config = json.loads((out / "config.json").read_text())
    assert config["architecture"] == "resnet18" and config["pretrained_cfg"]
    exported = timm.create_model(config["architecture"], num_classes=config["num_classes"],
                                 **config.get("model_args", {}))
    exported.load_state_dict(load_file(str(out / WEIGHTS)))
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(exported.eval()(x), trained.module.model.eval()(x))
    local = timm.create_model(f"local-dir:{out}", pretrained=True)  # timm's own folder format
    assert torch.equal(local.eval()(x), exported(x))


TEXTS = ["alpha beta alpha", "I feel furious", "gamma ünïcode ✓ 😀", "<pad> is text here", "nul \x00 and\ttab\r\n",
         "delta " * 12]
"""Texts a byte tokenizer could get wrong: non-ASCII, a special token's name, control bytes, one past seq_len."""


def test_a_byte_level_classifier_export_predicts_in_a_pipeline_what_runner_predicts(bert: TrainedRun) -> None:
    """transformers' own pipeline on the export: the tokenizer gives runner's ids (bytes + 1, cut at data.seq_len),
    and each text gets the class and score the trained module gives runner's ids (not one class for every text)."""
    from transformers import AutoTokenizer, pipeline

    from runner.data.tokens.tokenizers import load_tokenizer

    out, seq_len = bert.run_dir / "model", 32
    ours = load_tokenizer(None, offset=1)  # what runner's classifier data reads text with
    tokenizer = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    for text in TEXTS:
        assert tokenizer(text)["input_ids"] == ours([text])[0].tolist()
        assert tokenizer(text, truncation=True)["input_ids"] == ours([text], seq_len)[0].tolist()
        assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    classify = pipeline("text-classification", model=str(out))
    model, names = bert.module.model.eval(), sorted(after_runs.CLASSES)
    for text, got in zip(TEXTS, classify(TEXTS, truncation=True), strict=True):
        ids = torch.tensor(ours([text], seq_len)[0], dtype=torch.long)[None]
        with torch.no_grad():
            probs = model({"input_ids": ids, "attention_mask": torch.ones_like(ids)}).softmax(-1)[0]
        assert got["label"] == names[int(probs.argmax())]
        assert got["score"] == pytest.approx(float(probs.max()), rel=1e-5)


def test_a_causal_lm_export_writes_in_a_pipeline_what_runner_generates(llama: TrainedRun, bpe: TrainedRun) -> None:
    """Byte-level (its ids are the prompt's bytes) and with the tokenizer of its model.path: the same text."""
    from transformers import pipeline

    from runner.after.family import tokens_of

    for trained in (llama, bpe):
        write = pipeline("text-generation", model=str(trained.run_dir / "model"))
        tokens = tokens_of(open_trained(trained.run_dir).cfg)
        assert tokens is not None
        for prompt in ("import ", "é ✓ <pad>"):
            if trained is llama:
                assert write.tokenizer(prompt)["input_ids"] == list(prompt.encode())
            ours = generate_ids(trained.module.model, tokens.encode(prompt), Sampling(max_new_tokens=12, temperature=0))
            got = write(prompt, do_sample=False, max_new_tokens=12)[0]["generated_text"]
            assert got == prompt + tokens.decode(ours)


def test_runners_gpt_export_carries_its_byte_tokenizer_and_a_pipeline_refuses_the_model(gpt: TrainedRun) -> None:
    """runner's GPT is no transformers model: its config.json (runner's node, no model_type) makes pipeline refuse
    it; its ids load with AutoTokenizer all the same."""
    from transformers import AutoTokenizer, pipeline

    out = gpt.run_dir / "model"
    tokenizer = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    assert all(tokenizer(text)["input_ids"] == list(text.encode()) for text in TEXTS)
    assert "tokenizer.json beside the model" in json.loads((out / METADATA).read_text())["tokenizer"]
    with pytest.raises(ValueError, match="model_type"):
        pipeline("text-generation", model=str(out))


def test_a_transformers_model_whose_ids_runner_does_not_know_makes_the_pipeline_refuse(
        llama: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A transformers model trained on a data module of the user's own (no tokenizer runner knows): its export
    carries none, and its config makes AutoTokenizer, and so pipeline, refuse instead of guessing one."""
    import dataclasses

    from transformers import AutoModelForCausalLM, pipeline

    from runner.after.export import export_model
    from runner.config.schema.data import SyntheticDataSchema

    trained = open_trained(llama.run_dir)
    own_data = dataclasses.replace(trained.cfg, data=SyntheticDataSchema(_target_="my_project.MyData"))
    out = export_model(trained.model, own_data, llama.run_dir, tmp_path / "out", None, None)
    assert not (out / "tokenizer.json").exists() and "no tokenizer was exported" in (out / "README.md").read_text()
    with pytest.raises(ValueError):
        pipeline("text-generation", model=str(out))
    AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True)  # the model itself loads
    capsys.readouterr()
    _refused(["generate", str(out)], capsys, "holds no tokenizer", "sample it with the tokenizer")


def test_a_run_trained_on_a_gpu_exports_and_evaluates_on_a_machine_without_one(
        gpt: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The after-training commands check what building the model and reading the data need, not the trainer's
    machine: the run's own trainer=gpu is no reason to refuse them here."""
    from runner.after.evaluate import eval_device
    from runner.after.source import run_config

    copy = tmp_path / "gpu_run"
    shutil.copytree(gpt.run_dir / ".hydra", copy / ".hydra")
    shutil.copytree(gpt.run_dir / "checkpoints", copy / "checkpoints")
    with (copy / ".hydra" / "overrides.yaml").open("a") as f:
        f.write("- trainer=gpu\n")
    assert run_config(copy).trainer.accelerator == "cuda"
    assert main(["export", str(copy), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / WEIGHTS).is_file() and "runner export: " in capsys.readouterr().out
    if not torch.cuda.is_available():
        assert eval_device(run_config(copy)) == torch.device("cpu")


# -- eval -------------------------------------------------------------------------------------------------
def test_eval_scores_every_validation_target_of_a_language_model(gpt: TrainedRun,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from runner.after.source import run_config
    from runner.build import build_datamodule

    assert main(["eval", str(gpt.run_dir)]) == 0
    figures = json.loads((gpt.run_dir / "eval.json").read_text())
    dm = build_datamodule(run_config(gpt.run_dir))
    dm.setup("validate")
    model, total, count = gpt.module.model.eval(), 0.0, 0
    with torch.no_grad():
        for x, y in dm.val_dataloader():
            total += float(F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE_INDEX,
                                           reduction="sum"))
            count += int((y != IGNORE_INDEX).sum())
    assert figures["eval/tokens"] == count
    assert figures["eval/loss"] == pytest.approx(total / count, rel=1e-5)
    assert figures["eval/perplexity"] == pytest.approx(math.exp(figures["eval/loss"]), rel=1e-4)
    assert figures["eval/bpb"] == pytest.approx(figures["eval/loss"] / math.log(2), rel=1e-5)
    assert figures["eval/mode"].startswith("eager: ")  # the run measured no speedup: nothing to pay for a compile
    assert "perplexity" in capsys.readouterr().out


def test_bits_per_byte_only_where_the_ids_are_bytes_and_eval_summary_and_report_agree(
        gpt: TrainedRun, bpe: TrainedRun, capsys: pytest.CaptureFixture[str]) -> None:
    """A model reading its own BPE tokenizer's ids has no bits per byte anywhere (a loss per token is none): not in
    runner eval, not in the summary, not in report.json; the byte-level GPT has it in all three."""
    from runner.telemetry.report import format_summary

    for trained, per_byte in ((gpt, True), (bpe, False)):
        assert main(["eval", str(trained.run_dir)]) == 0
        printed = capsys.readouterr().out
        figures = json.loads((trained.run_dir / "eval.json").read_text())
        report = json.loads((trained.run_dir / "report.json").read_text())
        assert ("eval/bpb" in figures) is per_byte and ("bits per byte" in printed) is per_byte
        assert ("val/bpb" in report) is per_byte and ("val/bpb" in trained.figures) is per_byte
        assert ("val bits per byte" in format_summary(trained.figures)) is per_byte
        assert figures["eval/loss"] > 0 and figures["eval/perplexity"] > 1


def test_a_saved_models_export_records_the_config_it_was_loaded_with_and_no_progress_bars(
        bpe: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """runner_export.json of a model loaded from model.path leaves out the family's config and overrides (never
    applied to it); export, eval and generate draw no "Loading weights" bars."""
    meta = json.loads((bpe.run_dir / "model" / METADATA).read_text())
    assert meta["model"]["path"] and "config" not in meta["model"] and "overrides" not in meta["model"]
    capsys.readouterr()
    assert main(["export", str(bpe.run_dir), "--out", str(tmp_path / "out")]) == 0
    assert main(["generate", str(tmp_path / "out"), "--prompt", "def ", "--max-new-tokens", "4"]) == 0
    assert main(["eval", str(bpe.run_dir), "--out", str(tmp_path / "eval.json")]) == 0
    shown = capsys.readouterr()
    assert "Loading weights" not in shown.err + shown.out and "Writing model shards" not in shown.err + shown.out
    assert (tmp_path / "out" / "tokenizer.json").is_file() and (tmp_path / "eval.json").is_file()


def test_eval_of_a_classifier_gives_per_class_figures_and_a_confusion_matrix(
        bert: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    held_out = after_runs.labelled_jsonl(tmp_path / "held_out.jsonl", rows=120)
    out = tmp_path / "held_out_eval.json"
    assert main(["eval", str(bert.run_dir), "--out", str(out), f"data.path={held_out}"]) == 0
    f = json.loads(out.read_text())
    matrix = torch.tensor(f["eval/confusion"])
    assert matrix.shape == (4, 4) and int(matrix.sum()) == f["eval/examples"] == sum(f["eval/support"])
    assert f["eval/accuracy"] == pytest.approx(float(matrix.diag().sum() / matrix.sum()), abs=1e-6)
    recall = matrix.diag() / matrix.sum(1).clamp(min=1)
    assert f["eval/recall"] == pytest.approx(recall.tolist(), abs=1e-6)
    assert f["eval/labels"] == sorted(after_runs.CLASSES) and f["eval/data"].endswith(f"data.path={held_out}")
    assert (tmp_path / "held_out_eval_confusion.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "macro-F1" in printed and "per class" in printed


def test_compiled_eval_scores_as_the_eager_one(gpt: TrainedRun) -> None:
    from runner.after import evaluate as ev
    from runner.build import build_datamodule

    trained = open_trained(gpt.run_dir)
    dm = build_datamodule(trained.cfg)
    dm.setup("validate")
    paid = {"perf/speedup_x": 2.0, "perf/break_even_step": 1}
    compiled, why = ev.resolve_mode(trained.cfg, paid, batches=len(dm.val_dataloader()))
    assert compiled and why.startswith("compiled (compile.backend=eager)")
    assert not ev.resolve_mode(trained.cfg, paid, batches=1)[0]
    assert not ev.resolve_mode(trained.cfg, {"perf/speedup_x": 0.9, "perf/break_even_step": "never"}, 100)[0]
    batches = list(itertools.islice(dm.val_dataloader(), 2))
    eager = ev.run_pass(trained.module, batches, trained.cfg, [], compiled=False)
    # compile.backend=eager replays the captured ops: the same kernels on the same batches, to the bit.
    assert ev.run_pass(trained.module, batches, trained.cfg, [], compiled=True)["eval/loss"] == eager["eval/loss"]


# -- generate ---------------------------------------------------------------------------------------------
def test_generate_from_the_checkpoint_and_from_the_export_write_the_same_text(
        gpt: TrainedRun, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--prompt", "def ", "--max-new-tokens", "12", "--seed", "3"]
    assert main(["generate", str(gpt.run_dir), *args]) == 0
    from_ckpt = capsys.readouterr().out
    assert main(["generate", str(gpt.run_dir / "model"), *args]) == 0
    assert capsys.readouterr().out == from_ckpt and from_ckpt.startswith("def ")


def test_a_prompts_file_writes_every_prompt_at_once_as_each_alone_and_says_its_speed(
        gpt: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompts = ["def ", "import os", "x"]
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n\n")  # a blank line is no prompt
    greedy = ["--max-new-tokens", "10", "--temperature", "0"]
    assert main(["generate", str(gpt.run_dir), "--prompts-file", str(tmp_path / "prompts.txt"), *greedy]) == 0
    out = capsys.readouterr()
    alone = []
    for prompt in prompts:
        assert main(["generate", str(gpt.run_dir), "--prompt", prompt, *greedy]) == 0
        alone.append(capsys.readouterr().out.rstrip("\n"))
    assert out.out == "".join(f"{text}\n\n" for text in alone)  # each prompt and its answer, then a blank line
    assert re.search(r"^30 tokens for 3 prompt\(s\) in [\d.]+ s \([\d.]+ tokens/s\), the first after [\d.]+ s$",
                     out.err.strip().splitlines()[-1])


def test_generate_compiled_with_the_runs_backend_writes_the_eager_text_and_names_its_shapes(
        gpt: TrainedRun, capsys: pytest.CaptureFixture[str]) -> None:
    greedy = ["--prompt", "def ", "--max-new-tokens", "6", "--temperature", "0"]
    assert main(["generate", str(gpt.run_dir), *greedy]) == 0
    eager = capsys.readouterr().out
    assert main(["generate", str(gpt.run_dir), *greedy, "--compile"]) == 0  # compile.backend of the run: eager
    out = capsys.readouterr()
    # "def " is 4 bytes: one row, padded to 16 positions, in the GPT's 32-position window.
    assert out.out == eager and out.err.rstrip().endswith(
        "; compiled the prefill of 1 x 16 into a cache of 32, the step of 1 into a cache of 32")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--prompt", "a", "--prompts-file", "p.txt"], "give one of them"),
    (["--prompts-file", "empty.txt"], "holds no prompt"),
    (["--prompts-file", "missing.txt"], "Give a UTF-8 text file"),
    (["--top-p", "0"], "--top-p 0.0: give the share of probability"),
])
def test_generate_refuses_prompts_and_settings_it_cannot_use(
        gpt: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        args: list[str], fragment: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.txt").write_text("a\n")
    (tmp_path / "empty.txt").write_text("\n \n")
    assert main(["generate", str(gpt.run_dir), *args]) == 2
    assert fragment in capsys.readouterr().err


def _uncached_greedy(model: torch.nn.Module, prompt: list[int], n: int, block: int | None = None) -> list[int]:
    """Greedy decoding without a cache: the whole sequence (its last ``block`` tokens) through ``forward`` per token."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(n):
            ids = torch.cat([ids, model(ids[:, -(block or ids.shape[1]):])[:, -1:].argmax(-1)], dim=1)
    return [int(i) for i in ids[0, len(prompt):]]


def _lengths_run(module: torch.nn.Module, call: Any) -> tuple[Any, list[int]]:
    """``call()``, and the length of every ids tensor ``module`` received meanwhile (its first input, or
    ``input_ids``)."""
    lengths: list[int] = []

    def hook(_: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        lengths.append(int((args[0] if args else kwargs["input_ids"]).shape[1]))

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        return call(), lengths
    finally:
        handle.remove()


def test_gpt_generation_runs_each_new_token_alone_on_its_kv_cache_and_writes_the_uncached_tokens(
        gpt: TrainedRun) -> None:
    model = gpt.module.model
    assert isinstance(model, GPT)
    prompt = list(b"def ")
    greedy, lengths = _lengths_run(model.tok_emb, lambda: generate_ids(model, prompt, Sampling(8, temperature=0)))
    assert lengths == [16] + [1] * 7  # the prompt once (left-padded to 16), then one token per step
    assert greedy == _uncached_greedy(model, prompt, 8)
    ids = torch.tensor([prompt + greedy])
    with torch.no_grad():
        full, cache, length = model(ids), model.new_cache(1, 32), 32
        keys = torch.arange(length)
        # Each position with its keys up to itself: one query against cached keys instead of the causal square, other
        # matmul shapes: the same sums in another order. Float32 rounding of sums of at most 4 x n_embd = 128 terms, in
        # two layers, on logits of magnitude below 1: within 256 eps (measured: about 1 eps).
        tol = 256 * torch.finfo(torch.float32).eps
        at = torch.arange(4)
        prompt_logits = model.decode(ids[:, :4], at, at, (keys <= at[:, None])[None, None], cache)
        torch.testing.assert_close(prompt_logits, full[:, 3], rtol=tol, atol=tol)
        for i in range(4, ids.shape[1]):
            at = torch.tensor([i])
            logits = model.decode(ids[:, i:i + 1], at, at, (keys <= i)[None, None, None], cache)
            torch.testing.assert_close(logits, full[:, i], rtol=tol, atol=tol)


def test_past_its_block_size_the_gpt_runs_the_moving_window_whole_as_uncached_decoding_does(gpt: TrainedRun) -> None:
    """Positions are absolute: once the text is longer than ``block_size`` (32 here), every position of the last
    32 tokens changes with each new token, so each one runs the whole window, as the uncached loop does."""
    model = gpt.module.model
    assert isinstance(model, GPT) and model.block_size == 32
    prompt = list(b"import os\n")
    greedy, lengths = _lengths_run(model.tok_emb, lambda: generate_ids(model, prompt, Sampling(40, temperature=0)))
    # The prompt left-padded to 16, one position a step up to the cache's 32, then the window whole.
    assert lengths == [16] + [1] * 16 + [32] * 23
    assert greedy == _uncached_greedy(model, prompt, 40, block=32)


def test_gpt_generation_reaches_blocks_inside_checkpoint_wrappers(gpt: TrainedRun) -> None:
    """offload=checkpoint leaves torch's checkpoint wrapper around each block after the fit: the end-of-fit sample
    still runs on the cache, through the blocks inside."""
    from runner.stack.offload.component import apply_checkpointing

    wrapped = copy.deepcopy(gpt.module.model)
    assert apply_checkpointing(wrapped) == ["blocks.0", "blocks.1"]
    sampling = Sampling(12, temperature=0)
    greedy, lengths = _lengths_run(wrapped.tok_emb, lambda: generate_ids(wrapped, list(b"def "), sampling))
    assert lengths == [16] + [1] * 11
    assert greedy == generate_ids(gpt.module.model, list(b"def "), sampling)


def test_transformers_generation_uses_the_kv_cache_and_matches_a_full_forward(llama: TrainedRun) -> None:
    model = llama.module.model
    prompt = list(b"import ")
    greedy, lengths = _lengths_run(model.model, lambda: generate_ids(model, prompt, Sampling(10, temperature=0)))
    assert lengths == [16] + [1] * 9  # the prompt once (left-padded to 16), then each new token alone
    # No cache: the whole sequence each step (runner's CausalLM runs with use_cache=False).
    assert greedy == _uncached_greedy(model, prompt, 10)
    sampled = [generate_ids(model, prompt, Sampling(max_new_tokens=10, seed=s)) for s in (1, 1, 2)]
    assert sampled[0] == sampled[1] != sampled[2]
    state = torch.random.get_rng_state()
    generate_ids(model, prompt, Sampling(max_new_tokens=3))
    assert torch.equal(torch.random.get_rng_state(), state)  # the process's random state is left alone


def test_a_causal_lm_run_ends_with_a_sample_in_its_report_unless_turned_off(gpt: TrainedRun) -> None:
    report = (gpt.run_dir / "report.md").read_text()
    assert "## Sample" in report and gpt.figures["run/sample"].startswith("\n")
    trained = open_trained(gpt.run_dir)
    trained.cfg.after.sample_tokens, trained.cfg.after.export = 0, False
    assert at_end_of_fit(trained.cfg, trained.model, gpt.run_dir, None, 3) == {}


# -- bad input: one paragraph, exit code 2, nothing written -----------------------------------------------------
def test_a_directory_that_is_no_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("x")
    for command in ("export", "eval", "generate"):
        _refused([command, str(tmp_path)], capsys, f"{tmp_path} is not a run directory", ".hydra/overrides.yaml",
                 "outputs/<date>/<time>-<name>")
    assert _listing(tmp_path) == ["notes.txt"]


def test_a_missing_or_truncated_checkpoint_is_refused(gpt: TrainedRun, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    before = _listing(gpt.run_dir)
    _refused(["eval", str(gpt.run_dir), "--ckpt", str(tmp_path / "nope.ckpt")], capsys, "does not exist", "--ckpt last")
    cut = tmp_path / "cut.ckpt"
    data = (gpt.run_dir / "checkpoints" / "last.ckpt").read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    _refused(["export", str(gpt.run_dir), "--ckpt", str(cut), "--out", str(tmp_path / "out")], capsys,
             "not a checkpoint torch can load", "cut short")
    _refused(["generate", str(gpt.run_dir), "--ckpt", "best"], capsys, "kept no best checkpoint", "--ckpt last")
    assert _listing(gpt.run_dir) == before and not (tmp_path / "out").exists()


def test_generate_on_a_classifier_is_refused(bert: TrainedRun, capsys: pytest.CaptureFixture[str]) -> None:
    _refused(["generate", str(bert.run_dir), "--prompt", "hi"], capsys, "sequence classifier",
             "not a causal language model", "runner eval RUN_DIR")
    _refused(["generate", str(bert.run_dir / "model")], capsys, "export of a classification model")


def test_eval_data_of_another_format_or_other_columns_or_labels_is_refused(
        bert: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _listing(bert.run_dir)
    tsv = tmp_path / "rows.tsv"
    tsv.write_text("".join(f"{c}\t{c} {c} {c} {c} {c}\n" for c in after_runs.CLASSES * 5))
    _refused(["eval", str(bert.run_dir), f"data.path={tsv}"], capsys, "is tab-separated", "trained on JSON lines")
    renamed = after_runs.labelled_jsonl(tmp_path / "renamed.jsonl", columns=("sentence", "label"))
    _refused(["eval", str(bert.run_dir), f"data.path={renamed}"], capsys, "has the columns sentence, label",
             "not text")
    other = after_runs.labelled_jsonl(tmp_path / "other.jsonl", classes=("alpha", "beta", "omega"))
    _refused(["eval", str(bert.run_dir), f"data.path={other}"], capsys, "never saw (omega)",
             "alpha, beta, delta, gamma")
    _refused(["eval", str(bert.run_dir), "model.num_labels=3"], capsys, "data.KEY=VALUE overrides only")
    assert _listing(bert.run_dir) == before


@pytest.mark.slow
def test_the_commands_exit_2_from_the_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline"}
    proc = subprocess.run([sys.executable, "-m", "runner", "export", str(tmp_path / "missing")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "does not exist" in proc.stderr
    assert _listing(tmp_path) == []


def _runner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline"}
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_an_unknown_flag_is_refused_with_the_closest_real_one_from_the_command_line(gpt: TrainedRun,
                                                                                     tmp_path: Path) -> None:
    """A misspelt flag was dropped (an unmerged export for --merged, 200 tokens for --max-new-token 5, rc 0): each
    command refuses it in one paragraph naming the real one, exit 2, nothing written; the real flags still work."""
    run, before = str(gpt.run_dir), _listing(gpt.run_dir)
    for args, real in ((["export", run, "--merged", "--out", str(tmp_path / "out")], "--merge"),
                       (["generate", run, "--max-new-token", "5"], "--max-new-tokens"),
                       (["eval", run, "--outt", str(tmp_path / "e.json")], "--out")):
        proc = _runner(*args, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        err = proc.stderr.strip()
        assert "\n" not in err and err.startswith(f"runner {args[0]}: {args[2]} is not a flag"), err
        assert f"did you mean {real}?" in err and "Usage: python -m runner " + args[0] in err, err
    assert _listing(tmp_path) == [] and _listing(gpt.run_dir) == before
    proc = _runner("generate", run, "--prompt", "def ", "--max-new-tokens", "5", "--temperature", "0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("def ") and len(proc.stdout.rstrip("\n").encode()) <= len("def ") + 5 * 4


def test_what_is_neither_a_flag_nor_an_override_is_refused(gpt: TrainedRun, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Only eval takes KEY=VALUE overrides after the run directory; an abbreviated flag is refused as a misspelt one
    is (a flag is given whole, as a config key is)."""
    run = str(gpt.run_dir)
    _refused(["eval", run, "data.max_bytes"], capsys, "'data.max_bytes' is no argument of runner eval",
             "flags and data.KEY=VALUE overrides")
    _refused(["export", run, "other"], capsys, "'other' is no argument of runner export", "flags only")
    _refused(["generate", run, "--temp=2"], capsys, "--temp is not a flag of runner generate: did you mean "
             "--temperature?")
    _refused(["generate", run, "--max-new-tokens", "many"], capsys, "invalid int value: 'many'", "Usage: ")
    out = tmp_path / "e.json"
    assert main(["eval", run, "--out", str(out), "data.max_bytes=30000"]) == 0  # an override still scores
    assert json.loads(out.read_text())["eval/tokens"] > 0 and "perplexity" in capsys.readouterr().out


@pytest.mark.slow
def test_eval_says_how_far_it_is_and_ctrl_c_stops_it_saying_what_was_scored(gpt: TrainedRun, tmp_path: Path) -> None:
    """A long evaluation prints a progress line as data preparation does; SIGINT, sent once that line is out, ends it
    at once: one paragraph saying how many batches of how many were scored, no traceback, exit 130, no eval.json
    (figures of part of the split would pass for the split's)."""
    import signal
    import threading

    out = tmp_path / "eval.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    # ~10 MB of the run's text one window a batch: thousands of batches, minutes on a loaded machine
    proc = subprocess.Popen([sys.executable, "-m", "runner", "eval", str(gpt.run_dir), "--out", str(out),
                             "data.max_bytes=10000000", "data.batch_size=1"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            # as a terminal starts it: a suite run in the background inherits SIGINT ignored, and
                            # Python then leaves it ignored (no KeyboardInterrupt)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    watchdog = threading.Timer(900, proc.kill)  # no progress line ever (the old code): the output ends, the test fails
    watchdog.start()
    try:
        lines = []
        for line in proc.stdout:  # the first progress line: the scoring has begun and is far from its end
            lines.append(line)
            if line.startswith("eval: scoring the validation split of data.max_bytes=10000000 data.batch_size=1: "):
                break
        assert " batches (" in lines[-1] and "s left" in lines[-1], "".join(lines)
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read()
        assert proc.wait(timeout=300) == 130, rest
    finally:
        watchdog.cancel()
        proc.kill()
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest
    said = [line for line in rest.splitlines() if line.startswith("runner eval: interrupted")]
    assert len(said) == 1 and "nothing written" in said[0] and "whole pass only" in said[0], rest
    scored, total = (int(n.replace(",", "")) for n in said[0].split("after scoring ")[1].split(" batches")[0]
                     .split(" of "))
    assert 0 < scored < total
    assert not out.exists() and _listing(tmp_path) == []


def test_the_export_directory_is_whole_or_absent(gpt: TrainedRun, tmp_path: Path) -> None:
    """A failure while writing leaves no export and no temporary directory behind."""
    from runner.after import export as ex

    trained = open_trained(gpt.run_dir)
    real = ex._WRITERS[ex.Family.state_dict]

    def fail(*args: object) -> str:
        real(*args)  # type: ignore[arg-type]
        raise OSError("disk full")

    ex._WRITERS[ex.Family.state_dict] = fail
    try:
        with pytest.raises(OSError):
            ex.export_model(trained.model, trained.cfg, gpt.run_dir, tmp_path / "model", None, None)
    finally:
        ex._WRITERS[ex.Family.state_dict] = real
    assert _listing(tmp_path) == []
    shutil.rmtree(tmp_path, ignore_errors=True)
