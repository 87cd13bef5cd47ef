"""Training is never silently wrong: validation never holds a training window or row (every data family), the
model trains in train mode whatever ``from_pretrained`` left, and a saved model's tokenizer is the default."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn

from runner.config import ConfigError, compose, load
from runner.config.composing.precheck import precheck
from runner.data.classification import TextClassificationDataModule
from runner.data.images import ImageDataModule
from runner.data.synthetic import SyntheticDataModule
from runner.data.text import TextDataModule
from tests.hf_models import save_model, save_tokenizer


def words(seed: int, n: int) -> str:
    """``n`` random words: text whose windows are all different (a window in both splits is a leak)."""
    rng = random.Random(seed)
    return " ".join("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(n))


def paragraphs(seed: int, n: int) -> str:
    return "\n\n".join(words(seed * 1000 + i, 20 + i % 30) for i in range(n))


def sequences(dataset: Any) -> list[tuple[Any, ...]]:
    """Every item of a dataset as a hashable tuple of its ids or values (and label)."""
    out = []
    for i in range(len(dataset)):
        item = dataset[i]
        parts = [item] if isinstance(item, torch.Tensor) else list(item)
        out.append(tuple(tuple(torch.as_tensor(p).flatten().tolist()) for p in parts))
    return out


def _text(tmp_path: Path, files: int, **kwargs: Any) -> TextDataModule:
    root = tmp_path / "corpus"
    root.mkdir()
    for i in range(files):
        (root / f"doc{i}.txt").write_text(paragraphs(i, 40 if files == 1 else 6))
    return TextDataModule(path=str(root if files > 1 else root / "doc0.txt"), seq_len=16, min_len=4, **kwargs)


def _labelled(path: Path, rows: range) -> Path:
    path.write_text("".join(json.dumps({"text": words(i, 8), "label": ["neg", "pos"][i % 2]}) + "\n" for i in rows))
    return path


FAMILIES: dict[str, Callable[[Path], L.LightningDataModule]] = {
    "text, one file, packed (split by position)": lambda p: _text(p, 1),
    "text, one file, documents (split by position)": lambda p: _text(p, 1, batching="documents"),
    "text, many files, packed (split by document)": lambda p: _text(p, 12),
    "text, many files, documents (split by document)": lambda p: _text(p, 12, batching="documents"),
    "text, data.val_path": lambda p: TextDataModule(path=str(_text(p, 1).path),
                                                    val_path=str(_labelled(p / "val.txt", range(900, 960))),
                                                    seq_len=16),
    "text, a saved tokenizer, one file": lambda p: _text(p, 1, tokenizer=str(_tokenizer(p))),
    "labelled text (split by row)": lambda p: TextClassificationDataModule(
        path=str(_labelled(p / "rows.jsonl", range(200))), num_classes=2, min_len=4, batch_size=8),
    "labelled text, data.val_path": lambda p: TextClassificationDataModule(
        path=str(_labelled(p / "rows.jsonl", range(200))), val_path=str(_labelled(p / "val.jsonl", range(500, 540))),
        num_classes=2, min_len=4, batch_size=8),
    "synthetic": lambda p: SyntheticDataModule(num_samples=400),
    "images, synthetic": lambda p: ImageDataModule(num_samples=120, image_size=8, batch_size=8),
}


def _tokenizer(tmp_path: Path) -> Path:
    save_tokenizer(tmp_path / "tokenizer")
    return tmp_path / "tokenizer"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_training_sequence_is_in_validation(family: str, tmp_path: Path) -> None:
    dm = FAMILIES[family](tmp_path)
    dm.setup("fit")
    train, val = sequences(dm.train_dataloader().dataset), sequences(dm.val_dataloader().dataset)
    assert len(train) >= 8 and len(val) >= 1, (len(train), len(val))
    assert len(set(train)) > 0.9 * len(train)  # the data's windows differ: a shared one would be a leak
    assert not set(train) & set(val), f"{len(set(train) & set(val))} of {len(val)} validation items also train"


def test_one_document_is_split_by_position_and_no_token_is_in_both(tmp_path: Path) -> None:
    dm = _text(tmp_path, 1)
    dm.setup("fit")
    train, val = dm._train.stream.spans, dm._val.stream.spans  # type: ignore[union-attr]
    assert int(train.ends[-1]) <= int(val.starts[0]) and "position" in dm.split_how
    n_val, n_train = len(dm._val), len(dm._train)  # type: ignore[arg-type]
    assert 0.03 < n_val / (n_val + n_train) < 0.08  # val_fraction=0.05 of the windows


def _dataset_dict(root: Path, splits: dict[str, range]) -> Path:
    """A ``DatasetDict`` saved with ``save_to_disk``: labelled rows of random words in each split."""
    import datasets

    datasets.DatasetDict({name: datasets.Dataset.from_list(
        [{"text": words(i, 8), "label": ["neg", "pos"][i % 2]} for i in rows]) for name, rows in splits.items()}
    ).save_to_disk(str(root))
    return root


def test_a_dataset_dicts_own_validation_split_validates_and_the_log_says_so_whatever_read_it_first(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Its train split trains and its validation split validates (every family of text), data.val_path still wins;
    the lines about the table, said while nothing logs INFO (the checks before a run), are said when the run's
    logging can show them."""
    import logging

    from runner.data.reading.sources import resolve
    from runner.data.reading.tables import load_table

    root = _dataset_dict(tmp_path / "dd", {"train": range(200), "validation": range(500, 540), "test": range(900, 920)})
    rows = _labelled(tmp_path / "rows.jsonl", range(200))
    quiet = logging.getLogger("runner.data")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # as before the run's logging is set up: the tables are read, their lines held
    try:
        load_table(resolve(str(root)))
        load_table(resolve(str(rows)))
    finally:
        quiet.setLevel(level)
    with caplog.at_level(logging.INFO, logger="runner.data"):
        TextClassificationDataModule(path=str(rows), num_classes=2, min_len=4, batch_size=8).setup("fit")
    assert f"prepared 200 rows of data.path={rows}" in caplog.text
    held, said = {words(i, 8) for i in range(500, 540)}, ""
    for make in (lambda: TextClassificationDataModule(path=str(root), num_classes=2, min_len=4, batch_size=8),
                 lambda: TextDataModule(path=str(root), seq_len=8, batch_size=4, batching="documents", min_len=2)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="runner.data"):
            dm = make()
            dm.setup("fit")
        said += caplog.text
        assert "own validation split" in dm.split_how and "its train split trains" in dm.split_how
        offset = 1 if isinstance(dm, TextClassificationDataModule) else 0
        val = [bytes(x - offset for x in ids).decode() for ids, *_ in sequences(dm.val_dataloader().dataset)]
        assert val and all(any(piece in text for text in held) for piece in val)  # pieces of the validation split
        if offset:
            assert len(val) == 40
        assert not set(sequences(dm.train_dataloader().dataset)) & set(sequences(dm.val_dataloader().dataset))
    other = TextClassificationDataModule(path=str(root), num_classes=2, min_len=4, batch_size=8,
                                         val_path=str(root / "test"))
    other.setup("fit")
    assert other.split_how.startswith("data.val_path") and len(other._val) == 20  # type: ignore[arg-type]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="runner.data"):
        TextClassificationDataModule(path=str(root), num_classes=2, min_len=4, batch_size=8).setup("fit")
    assert "its validation split validates" not in caplog.text  # said once per process, not at every read
    assert said.count("a DatasetDict; its train split trains, its validation split validates") == 1


def test_a_val_path_that_is_the_data_path_is_refused(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(paragraphs(0, 40))
    with pytest.raises(ConfigError, match=r"data.val_path=.* is data.path itself: validation would be the training"):
        precheck(["+recipe=smoke", f"data.path={corpus}", f"data.val_path={corpus}"])


def test_images_from_a_folder_never_share_a_file(tmp_path: Path) -> None:
    from PIL import Image

    for c in range(2):
        (tmp_path / f"c{c}").mkdir()
        for i in range(10):
            Image.new("RGB", (4, 4), (c * 100, i * 20, 0)).save(tmp_path / f"c{c}" / f"{i}.png")
    dm = ImageDataModule(path=str(tmp_path), image_size=4, num_classes=2, batch_size=2)
    dm.setup("fit")
    train = {f for f, _ in dm._train.items}  # type: ignore[union-attr]
    val = {f for f, _ in dm._val.items}  # type: ignore[union-attr]
    assert train and val and not train & val


# -- the model trains in train mode --------------------------------------------------------------------------
class DropoutModes(L.Callback):
    """Whether each Dropout of the model is on, at every training and validation step."""

    def __init__(self) -> None:
        self.train: list[list[bool]] = []
        self.val: list[list[bool]] = []

    @staticmethod
    def _modes(module: nn.Module) -> list[bool]:
        return [m.training for m in module.modules() if isinstance(m, nn.Dropout) and m.p > 0]

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self.train.append(self._modes(pl_module))

    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self.val.append(self._modes(pl_module))


def test_a_saved_model_with_dropout_trains_in_train_mode(tmp_path: Path) -> None:
    """from_pretrained returns eval mode, and Lightning keeps the modes it finds: a saved BERT fine-tuned with its
    dropout off, silently. Here every training step has all of its dropout on, and validation none."""
    from runner.run import run

    bert = save_model(tmp_path / "bert", task="sequence_classification", model_type="bert")
    assert json.loads((bert / "config.json").read_text())["hidden_dropout_prob"] > 0
    labels = _labelled(tmp_path / "rows.jsonl", range(64))
    modes = DropoutModes()
    cfg = load(compose(["+recipe=bert_classify", "compile.backend=eager", f"model.path={bert}", f"data.path={labels}",
                        "data.num_classes=2", "data.min_len=4", "data.batch_size=8", "trainer.max_steps=2",
                        "trainer.val_check_interval=2", "trainer.limit_val_batches=2", "telemetry.speedup_steps=0"],
                       run_dir=str(tmp_path / "run")))
    assert cfg.data.tokenizer == str(bert)  # type: ignore[union-attr]  # the model's own tokenizer, by default
    result = run(cfg, extra_callbacks=[modes])
    assert len(modes.train) == 2 and modes.val
    # What the classifier's ids mean, beside its checkpoints (an export reads this file).
    assert json.loads((result.run_dir / "labels.json").read_text()) == {
        "label2id": {"neg": 0, "pos": 1}, "id2label": {"0": "neg", "1": "pos"}}
    # ... and what it read, in the summary's data section.
    report = json.loads((result.run_dir / "report.json").read_text())
    assert report["data/rows"] == 64 and report["data/label_counts"] == {"neg": 32, "pos": 32}
    assert report["data/train_sequences"] + report["data/val_sequences"] == 64
    assert "| label counts | neg 32, pos 32 |" in (result.run_dir / "report.md").read_text()
    assert all(len(m) >= 5 and all(m) for m in modes.train), modes.train
    assert all(len(m) >= 5 and not any(m) for m in modes.val), modes.val


# -- the model's own tokenizer, and the vocabulary check -------------------------------------------------
def test_a_saved_models_tokenizer_is_every_text_familys_default(tmp_path: Path) -> None:
    saved = save_model(tmp_path / "llama")

    def tokenizer(*overrides: str) -> Any:
        return load(compose(list(overrides), run_dir=str(tmp_path / "run"))).data.tokenizer  # type: ignore[union-attr]

    assert tokenizer("+recipe=llama_tiny", f"model.path={saved}") == str(saved)  # data=text
    assert tokenizer("+recipe=llama_tiny", f"model.path={saved}", "data=tokenized_text") == str(saved)
    assert tokenizer("+recipe=llama_tiny") is None  # no model.path: bytes
    assert tokenizer("+recipe=llama_tiny", f"model.path={saved}", "data.tokenizer=bytes") == "bytes"
    assert tokenizer("+recipe=bert_classify") is None


def test_a_tokenizer_larger_than_the_models_embedding_is_refused(tmp_path: Path) -> None:
    saved = save_model(tmp_path / "llama")  # a 320-id tokenizer and a model of 320 rows
    bigger = tmp_path / "bigger"
    assert save_tokenizer(bigger, vocab_size=600) > 320
    with pytest.raises(ConfigError) as info:
        precheck(["+recipe=llama_tiny", f"model.path={saved}", f"data.tokenizer={bigger}"])
    message = str(info.value)
    assert "\n" not in message and "embeds 320 ids" in message and "go up to 331" in message, message
    assert "drop data.tokenizer" in message, message
    with pytest.raises(ConfigError, match=r"go up to 319 .*embeds 256 ids.*Set model.vocab_size=320"):
        precheck(["+recipe=smoke", f"data.tokenizer={saved}"])  # runner's byte-level GPT
    precheck(["+recipe=llama_tiny", f"model.path={saved}"])  # its own tokenizer fits
