"""runner.hub's decisions, each on its own: what a setting's value names, which files of a repo a setting reads, when
a snapshot is whole, how a command line is pinned. (Against a Hub: tests/test_hub.py.)"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from runner import hub
from runner.config.composing.hub_names import pinned_overrides

COMMIT = "a" * 40


@pytest.mark.parametrize(("key", "value", "kind", "name", "revision"), [
    ("model.path", "Qwen/Qwen2.5-0.5B", "model", "Qwen/Qwen2.5-0.5B", None),
    ("model.path", "org/m@v1.0", "model", "org/m", "v1.0"),
    ("model.path", f"hf://org/m@{COMMIT}", "model", "org/m", COMMIT),
    ("peft.path", "org/adapter", "adapter", "org/adapter", None),
    ("data.path", "hf://datasets/org/d@refs/convert/parquet", "data", "org/d", "refs/convert/parquet"),
    ("data.path", "org/d", "data", "org/d", None),
])
def test_a_name_in_each_form(key: str, value: str, kind: str, name: str, revision: str | None) -> None:
    w = hub.wanted(key, value, kind)
    assert w is not None and (w.name, w.revision, w.kind) == (name, revision, kind)
    assert w.at(COMMIT).endswith(f"{name}@{COMMIT}") and w.at(COMMIT).startswith(value.split(name)[0])


def test_a_path_that_exists_or_looks_like_one_is_no_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "model").mkdir(parents=True)
    assert hub.wanted("model.path", "org/model", "model") is None  # it exists: a path wins
    assert hub.wanted("data.path", "data/train.jsonl", "data") is None  # a missing file, not a repo
    assert hub.wanted("model.path", "./org/other", "model") is None
    assert hub.wanted("data.path", None, "data") is None
    with pytest.raises(hub.HubError, match="takes a model repo"):
        hub.wanted("model.path", "hf://datasets/org/d", "model")
    with pytest.raises(hub.HubError, match=r"takes a data set of the Hub: hf://datasets/ORG/NAME"):
        hub.wanted("data.path", "hf://org/d", "data")


def _w(kind: str, **more: str) -> hub.Wanted:
    return hub.Wanted(f"{kind}.path", "org/x", "org/x", None, kind, **more)  # type: ignore[arg-type]


def test_a_model_reads_its_top_level_files_and_one_format_of_weights() -> None:
    listing = dict.fromkeys(["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                             "model.safetensors.index.json", "pytorch_model.bin", "tokenizer.json",
                             "tokenizer_config.json", "README.md", ".gitattributes", "original/consolidated.00.pth",
                             "chat_template.jinja", "merges.txt"], 1)
    assert hub.needed(_w("model"), listing) == ["chat_template.jinja", "config.json", "merges.txt",
                                                "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                                "model.safetensors.index.json", "tokenizer.json",
                                                "tokenizer_config.json"]
    assert "pytorch_model.bin" in hub.needed(_w("model"), {"config.json": 1, "pytorch_model.bin": 1})


@pytest.mark.parametrize(("kind", "listing", "fragment"), [
    ("model", {"notes.md": 1}, "holds no model"),
    ("model", {"adapter_config.json": 1, "adapter_model.safetensors": 1}, "give it as peft.path"),
    ("model", {"config.json": 1, "onnx/model.onnx": 1}, "holds no weights"),
    ("adapter", {"config.json": 1, "model.safetensors": 1}, "holds no adapter"),
    ("tokenizer", {"config.json": 1}, "holds no tokenizer"),
    ("data", {"README.md": 1, "notes.txt.bak": 1}, "holds no data files"),
])
def test_a_repo_without_what_the_setting_reads_is_refused(kind: str, listing: dict[str, int], fragment: str) -> None:
    with pytest.raises(hub.HubError, match=fragment):
        hub.needed(_w(kind), listing)


CARD = """---
configs:
- config_name: en
  default: true
  data_files:
  - split: train
    path: en/train-*
  - split: validation
    path: [en/valid.parquet]
- config_name: fr
  data_files: fr/**/*.jsonl
---
"""


def test_a_data_set_reads_the_files_of_its_chosen_config_only() -> None:
    assert hub.configs(CARD) == {"en": {"train": ["en/train-*"], "validation": ["en/valid.parquet"]},
                                 "fr": {"train": ["fr/**/*.jsonl"]}}
    listing = dict.fromkeys(["README.md", "en/train-0.parquet", "en/train-1.parquet", "en/valid.parquet",
                             "fr/a/b.jsonl", "fr/c.jsonl", "en/sub/train-9.parquet"], 1)
    assert hub.needed(_w("data", config="fr"), listing, CARD) == ["README.md", "fr/a/b.jsonl", "fr/c.jsonl"]
    assert hub.needed(_w("data", config="en"), listing, CARD) == ["README.md", "en/train-0.parquet",
                                                                   "en/train-1.parquet", "en/valid.parquet"]
    with pytest.raises(hub.HubError, match="choose one with data.config=en"):
        hub.needed(_w("data"), listing, CARD)
    with pytest.raises(hub.HubError, match="Did you mean data.config=fr"):
        hub.needed(_w("data", config="fre"), listing, CARD)


def _safetensors(path: Path, data_bytes: int, cut: int = 0) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [data_bytes // 4], "data_offsets": [0, data_bytes]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * (data_bytes - cut))


def test_a_snapshot_is_whole_only_with_every_file_at_its_size(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    _safetensors(tmp_path / "model-1.safetensors", 64)
    index = {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    files: dict[str, int | None] = {"config.json": 2, "model-1.safetensors": None, "model.safetensors.index.json": None}
    assert hub.missing(tmp_path, files) == ["model-2.safetensors (a shard model.safetensors.index.json names)"]
    _safetensors(tmp_path / "model-2.safetensors", 64, cut=8)
    assert hub.missing(tmp_path, {**files, "model-2.safetensors": None}) == [
        "model-2.safetensors (127 of 135 bytes)"]
    assert hub.missing(tmp_path, {"config.json": 5}) == ["config.json (2 of 5 bytes)"]
    assert hub.missing(tmp_path, {"tokenizer.json": 5}) == ["tokenizer.json (absent)"]


def _pin(key: str, given: str, kind: str = "model", implied: bool = False) -> hub.Pin:
    w = hub.Wanted(key, given, given.removeprefix(hub.DATASETS).split("@")[0], None, kind, implied=implied)
    return hub.Pin(w, COMMIT, "/x", 1, 1)


def test_the_command_line_is_pinned_in_place_and_a_sweep_value_by_value() -> None:
    pins = [_pin("model.path", "org/a"), _pin("data.path", "hf://datasets/org/d", "data"),
            _pin("data.tokenizer", "org/a", implied=True)]
    out, asked = pinned_overrides(["+recipe=x", "-m", "model.path=org/a,org/b", "data.config=c"], pins)
    assert out == ["+recipe=x", "-m", f"model.path=org/a@{COMMIT},org/b", "data.config=c",
                   f"data.path=hf://datasets/org/d@{COMMIT}"]  # a recipe's data.path: appended; the tokenizer not
    assert asked == {f"org/a@{COMMIT}": "main", f"hf://datasets/org/d@{COMMIT}": "main"}


def test_a_data_set_without_configs_splits_by_file_name_as_datasets_does(tmp_path: Path) -> None:
    for name in ("train.jsonl", "validation.jsonl", "test.jsonl"):
        (tmp_path / name).write_text('{"text": "a"}\n')
    (tmp_path / "README.md").write_text("# no card data\n")
    found = hub.splits(_w("data"), tmp_path)
    assert {k: [Path(f).name for f in v] for k, v in found.items()} == {
        "train": ["train.jsonl"], "validation": ["validation.jsonl"], "test": ["test.jsonl"]}
    pin = hub.Pin(_w("data"), COMMIT, str(tmp_path), 4, 4, found)
    assert hub.split_path(pin, "validation") == str(tmp_path / "validation.jsonl")
    with pytest.raises(hub.HubError, match="Did you mean data.split=train"):
        hub.split_path(pin, "trian")
