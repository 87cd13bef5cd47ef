"""transformers models from config and from a saved directory, their data, and their bad input: built offline
(random weights, a tokenizer trained in the test), checked before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from runner.config import ConfigError, compose, load
from runner.config.composing.precheck import precheck
from runner.data.classification import TextClassificationDataModule
from runner.data.classification.datamodule import ClassifyCollate
from runner.data.classification.labelled import read_labelled
from runner.data.classification.labels import label_map
from runner.data.sequences.padding import IGNORE_INDEX, PadTo
from runner.data.text import TextDataModule
from runner.models.hf import CausalLM, SequenceClassifier, build_config
from runner.training.module import lm_loss
from tests.family_fits import BERT, CAUSAL
from tests.hf_models import save_model
from tests.test_reliability_support import env
from tests.tolerance import drift

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_model(tmp_path_factory.mktemp("llama"))


# -- models ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", sorted(CAUSAL))
def test_causal_lm_from_config_returns_logits_over_the_byte_vocabulary(family: str) -> None:
    model = CausalLM(config=family, overrides=CAUSAL[family])
    x = torch.randint(0, 256, (2, 17))
    assert model(x).shape == (2, 17, 256)
    assert model.model.config.model_type == family


def test_special_token_ids_outside_a_smaller_vocabulary_are_dropped() -> None:
    cfg = build_config("gpt2", {"vocab_size": 256, "n_layer": 1})
    assert cfg.bos_token_id is None and cfg.eos_token_id is None  # GPT-2's 50256 is no byte
    kept = build_config("gpt2", {"vocab_size": 256, "bos_token_id": 1})
    assert kept.bos_token_id == 1  # given: kept


def test_null_override_keeps_the_family_default_and_class_names_work() -> None:
    cfg = build_config("GPT2Config", {"intermediate_size": None, "hidden_size": 32, "vocab_size": 256})
    assert type(cfg).__name__ == "GPT2Config" and cfg.n_embd == 32 and not hasattr(cfg, "intermediate_size")


def test_padding_is_invisible_to_the_causal_lm_loss() -> None:
    """Right padding with causal attention and ignored targets: the padded batch's loss is the unpadded one."""
    torch.manual_seed(0)
    model = CausalLM(config="llama", overrides=CAUSAL["llama"])
    seq = torch.randint(0, 256, (1, 12))
    padded_x = torch.cat([seq[:, :-1], torch.zeros(1, 5, dtype=torch.long)], dim=1)
    padded_y = torch.cat([seq[:, 1:], torch.full((1, 5), IGNORE_INDEX)], dim=1)
    # Another sequence length runs the attention and the matmuls over other shapes (other blockings and
    # reduction orders): one forward of a small Llama, some 64 dependent roundings.
    torch.testing.assert_close(lm_loss(model(padded_x), padded_y), lm_loss(model(seq[:, :-1]), seq[:, 1:]),
                               **drift(steps=1, depth=64).kwargs)


def test_classifier_masks_padding() -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(config="bert", overrides=BERT, num_labels=3).eval()
    ids = torch.randint(1, 257, (1, 9))
    short = model({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    pad = torch.zeros(1, 7, dtype=torch.long)
    long = model({"input_ids": torch.cat([ids, pad], 1),
                  "attention_mask": torch.cat([torch.ones_like(ids), pad], 1)})
    assert short.shape == (1, 3)
    torch.testing.assert_close(short, long, rtol=1e-4, atol=1e-5)


def test_saved_model_loads_from_its_directory_offline(saved_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(saved_llama)
    model = CausalLM(config="llama", path=str(saved_llama), overrides={"hidden_size": 999})  # overrides: not applied
    for (name, a), b in zip(reference.state_dict().items(), model.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name  # the weights saved and loaded again: bitwise


def test_a_saved_models_unused_settings_are_said_once(saved_llama: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The config checks build the model on the meta device (its config.json), the run builds it for real, and
    each used to log that ``model.config`` and ``overrides`` are not applied: three times in a run's log."""
    import logging

    overrides = {"hidden_size": 48, "num_hidden_layers": 1}
    with caplog.at_level(logging.INFO, logger="runner.models.hf"):
        with torch.device("meta"):
            meta = CausalLM(config="llama", path=str(saved_llama), overrides=overrides)
        for _ in range(2):
            CausalLM(config="llama", path=str(saved_llama), overrides=overrides)
    said = [r for r in caplog.records if "own configuration is used" in r.getMessage()]
    assert len(said) == 1 and "overrides.hidden_size" in said[0].getMessage()
    assert next(meta.parameters()).device.type == "meta" and meta.model.config.hidden_size == 32  # its config.json


def test_saved_encoder_gets_a_head_of_num_labels(tmp_path: Path) -> None:
    directory = save_model(tmp_path / "bert", task="sequence_classification", model_type="bert")
    model = SequenceClassifier(path=str(directory), num_labels=5)
    ids = torch.randint(0, 50, (2, 7))
    assert model({"input_ids": ids, "attention_mask": torch.ones_like(ids)}).shape == (2, 5)


# -- data -----------------------------------------------------------------------------------------------
def test_tokenized_documents_pad_with_the_tokenizers_pad_id_and_ignore_it(saved_llama: Path, tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join(f"def f{i}(a, b):\n    return a + b * {i}" * (1 + i % 3) for i in range(60)))
    dm = TextDataModule(tokenizer=str(saved_llama), path=str(text), batching="documents", seq_len=48,
                                 min_len=4, batch_size=4)
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    assert dm.pad_id == 0  # the tokenizer's <pad>
    padded = y == IGNORE_INDEX
    assert padded.any() and (x[padded] == dm.pad_id).all()  # padding: pad id in, ignored out
    assert (x[~padded] < 320).all()


def test_labelled_file_formats_and_label_ids(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": f"text number {i}", "label": ["neg", "pos"][i % 2]})
                               for i in range(6)))
    tsv = tmp_path / "b.tsv"
    tsv.write_text("1\tone two three\n0\tfour five six\n")
    rows = read_labelled(str(jsonl), "data.path", "text", "label", None, 4).rows
    assert rows[0] == {"text": "text number 0", "label": "neg"}
    assert read_labelled(str(tsv), "data.path", "text", "label", None, 4).rows[:] == {
        "text": ["one two three", "four five six"], "label": ["1", "0"]}
    assert label_map({"pos": 2, "neg": 1}, "").label2id == {"neg": 0, "pos": 1}
    assert label_map({"1": 1, "0": 1, "3": 1}, "").label2id == {"0": 0, "1": 1, "3": 3}


def test_classification_batches_are_padded_per_policy_with_a_mask() -> None:
    items = [(torch.tensor([5, 6, 7]), 1), (torch.tensor([8]), 0)]
    inputs, labels = ClassifyCollate(PadTo(), 0)(items)
    assert inputs["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert inputs["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert labels.tolist() == [1, 0]
    bucketed, _ = ClassifyCollate(PadTo((4, 8)), 0)(items)
    assert bucketed["input_ids"].shape == (2, 4)


def test_default_classification_task_reads_the_stdlib() -> None:
    dm = TextClassificationDataModule(max_examples=400, batch_size=8)
    dm.setup()
    inputs, labels = next(iter(dm.train_dataloader()))
    assert set(labels.tolist()) <= {0, 1, 2, 3} and inputs["input_ids"].max() <= 256
    lengths = inputs["attention_mask"].sum(1)
    assert inputs["input_ids"].shape[1] == lengths.max() and len(set(lengths.tolist())) > 1


# -- every option and recipe composes -------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["llama_tiny", "gpt2_tiny", "bert_classify"])
def test_recipes_validate(recipe: str, tmp_path: Path) -> None:
    cfg = load(compose([f"+recipe={recipe}"], run_dir=str(tmp_path)))
    assert cfg.recipe == recipe


def test_tokenized_text_follows_the_model_path(saved_llama: Path, tmp_path: Path) -> None:
    overrides = ["+recipe=llama_tiny", f"model.path={saved_llama}", "data=tokenized_text"]
    cfg = load(compose(overrides, run_dir=str(tmp_path)))
    assert cfg.data.tokenizer == str(saved_llama)  # type: ignore[union-attr]


# -- bad input: one paragraph, before anything is written ---------------------------------------------------
def _incomplete(tmp_path: Path) -> str:
    directory = tmp_path / "no_tokenizer"
    save_model(directory)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (directory / f).unlink()
    return str(directory)


BAD = [
    (["model.config=lama"], ["model.config=lama", "did you mean model.config=llama", "Available (", "gpt2"]),
    (["model.config=LlamaConfg"], ["did you mean model.config=LlamaConfig"]),
    (["+model.overrides.hiden_size=8"], ["model.overrides.hiden_size", "Did you mean model.overrides.hidden_size"]),
    (["model.config=gpt2"], ["model.overrides.intermediate_size is not a setting of GPT2Config", "n_inner", "null"]),
    (["model.path=/nonexistent/model"], ["model.path=/nonexistent/model does not exist", "model.config=NAME"]),
    (["model.path=meta-llama/Llama-3.2-1B"], ["HF_HUB_OFFLINE=1 is set", "does not hold meta-llama/Llama-3.2-1B",
                                              "`hf download meta-llama/Llama-3.2-1B --revision main`"]),
    (["model.path=INCOMPLETE"], ["lacks a tokenizer", "tokenizer.json", "save_pretrained"]),
    (["model=hf_classifier", "data=text_classification", "model.config=codegen"],
     ["model.config=codegen", "codegen has no sequence classifier", "Available ("]),
    (["model=hf_classifier", "data=text_classification", "data.path=LABELS", "data.num_classes=2"],
     ["holds 3 classes", "model.num_labels=2", "Set data.num_classes=3"]),
    (["data=tokenized_text"], ["data.tokenizer is empty", "model.path"]),
]


@pytest.mark.parametrize(("overrides", "fragments"), BAD, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_bad_input_is_one_paragraph_naming_the_fix(overrides: list[str], fragments: list[str], tmp_path: Path) -> None:
    labels = tmp_path / "labels.tsv"
    labels.write_text("a\tsome text here, long enough\nb\tmore text here, long enough\nc\tand more text, long enough\n")
    swap = {"INCOMPLETE": _incomplete(tmp_path) if "model.path=INCOMPLETE" in overrides else "", "LABELS": str(labels)}
    line = [o.replace("INCOMPLETE", swap["INCOMPLETE"]).replace("LABELS", swap["LABELS"]) for o in overrides]
    with pytest.raises(ConfigError) as info:
        precheck(["+recipe=llama_tiny", *line])
    message = str(info.value)
    assert "\n" not in message.strip()
    for fragment in fragments:
        assert fragment in message, message


_ASKED: list[str] | None = None  # while a list: the network calls this process makes (an audit hook cannot be removed)


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _ASKED is not None and event in ("socket.getaddrinfo", "socket.connect"):
        _ASKED.append(f"{event}{args[:2]}")


def test_an_uncached_hub_name_offline_is_refused_without_asking_the_network() -> None:
    """Offline (the suite sets HF_HUB_OFFLINE=1, tests/conftest.py), a name the cache lacks is refused with the
    command that fetches it, and nothing in the check opens a connection (transformers once looked a non-directory
    up on the Hub even under local_files_only: five retries, ~23 s)."""
    global _ASKED
    sys.addaudithook(_audit)
    _ASKED = []
    try:
        with pytest.raises(ConfigError, match="HF_HUB_OFFLINE=1 is set"):
            precheck(["+recipe=llama_tiny", "model.path=meta-llama/Llama-3.2-1B"])
        asked = list(_ASKED)
    finally:
        _ASKED = None
    assert asked == []


@pytest.mark.slow
def test_a_bad_model_writes_nothing_and_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "runner", "+recipe=llama_tiny", "model.config=lama"], cwd=tmp_path,
                          env={**env(), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "did you mean model.config=llama" in proc.stderr + proc.stdout
    assert os.listdir(tmp_path) == []  # no outputs/, no run directory
