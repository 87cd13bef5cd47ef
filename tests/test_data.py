"""Local data: stdlib corpus, deterministic split, packed and per-document batches, padding masked."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from runner.config.schema.data import Batching
from runner.data.reading.corpus import read_documents, stdlib_dir
from runner.data.sequences.padding import IGNORE_INDEX, PadTo
from runner.data.synthetic import SyntheticDataModule
from runner.data.text import TextDataModule
from runner.data.text.datamodule import unigram_bits
from runner.training.module import lm_loss
from tests.tolerance import drift


def test_stdlib_corpus_is_real_text_in_a_stable_order() -> None:
    docs = read_documents(None, max_bytes=200_000)
    assert len(docs) > 5 and sum(map(len, docs)) >= 200_000
    assert docs == read_documents(None, max_bytes=200_000)
    assert stdlib_dir().is_dir()
    assert 3.0 < unigram_bits([np.frombuffer(b"".join(docs), np.uint8)]) < 6.0  # source code bytes, not noise (8 bits)


def test_missing_path_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="data.path"):
        read_documents(tmp_path / "nope", max_bytes=None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no non-empty text"):
        read_documents(tmp_path / "empty", max_bytes=None)


def test_packed_batches_are_shifted_windows() -> None:
    dm = TextDataModule(seq_len=16, batch_size=4, max_bytes=50_000)
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (4, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_split_is_deterministic_and_disjoint(tmp_path: Path) -> None:
    for i in range(20):
        (tmp_path / f"doc{i}.txt").write_text(f"document {i} " * (10 + i))
    a, b = TextDataModule(path=str(tmp_path), seq_len=8), TextDataModule(path=str(tmp_path), seq_len=8)
    a.setup(), b.setup()
    xa = next(iter(a.val_dataloader()))[0]
    xb = next(iter(b.val_dataloader()))[0]
    assert torch.equal(xa, xb)


def test_document_batches_vary_in_length_and_mask_padding() -> None:
    dm = TextDataModule(batching=Batching.documents, seq_len=512, batch_size=8, max_bytes=300_000)
    dm.setup()
    lengths = set()
    for i, (x, y) in enumerate(dm.train_dataloader()):
        lengths.add(x.shape[1])
        pad = y == IGNORE_INDEX
        assert (x[pad] == 0).all()
        if i > 30:
            break
    assert len(lengths) > 1  # real documents: different lengths


def test_padding_never_counts_in_the_loss() -> None:
    torch.manual_seed(0)
    logits = torch.randn(1, 5, 7)
    y = torch.tensor([[1, 2, 3, IGNORE_INDEX, IGNORE_INDEX]])
    # A mean over 3 targets with or without 2 ignored ones: the sums may take another order.
    assert torch.allclose(lm_loss(logits, y), lm_loss(logits[:, :3], y[:, :3]), **drift(steps=1, depth=4).kwargs)


def test_pad_to_buckets() -> None:
    assert PadTo()(37) == 37
    assert PadTo((64,))(37) == 64
    assert PadTo((32, 64, 128))(33) == 64
    with pytest.raises(ValueError, match="exceeds"):
        PadTo((32,))(40)


def test_synthetic_data_is_learnable_and_seeded() -> None:
    a, b = SyntheticDataModule(num_samples=256), SyntheticDataModule(num_samples=256)
    a.setup(), b.setup()
    xa, ya = next(iter(a.val_dataloader()))
    xb, yb = next(iter(b.val_dataloader()))
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert len(torch.unique(ya)) > 1


# -- length-grouped batches (data.length_grouping) ----------------------------------------------------
def _documents(**kwargs: object) -> TextDataModule:
    dm = TextDataModule(batching=Batching.documents, seq_len=256, batch_size=8, max_bytes=300_000, **kwargs)
    dm.setup()
    return dm


def _padding(loader: torch.utils.data.DataLoader) -> float:
    pad = total = 0
    for _, y in loader:
        pad += int((y == IGNORE_INDEX).sum())
        total += y.numel()
    return pad / total


def test_length_grouping_keeps_every_document_once_and_cuts_padding() -> None:
    random_order, grouped = _documents(), _documents(length_grouping=16)
    sampler = grouped.train_dataloader().batch_sampler
    batches = list(sampler)  # type: ignore[arg-type]
    flat = [i for b in batches for i in b]
    n = len(grouped._train)  # type: ignore[arg-type]
    assert all(len(b) == 8 for b in batches) and len(batches) == n // 8 == len(sampler)  # type: ignore[arg-type]
    assert len(set(flat)) == len(flat)  # each document at most once per epoch (the last partial batch dropped)
    assert _padding(grouped.train_dataloader()) < 0.1 < _padding(random_order.train_dataloader())
    # Deterministic: the same seed gives the same batches.
    assert batches == list(_documents(length_grouping=16).train_dataloader().batch_sampler)  # type: ignore[arg-type]


def test_length_grouped_loader_resumes_mid_epoch_at_the_same_batch() -> None:
    from runner.data.resumable import make_resumable

    dm = make_resumable(_documents(length_grouping=16))
    loader = dm.train_dataloader()
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()  # type: ignore[attr-defined]
    expected = [next(it)[0] for _ in range(3)]
    resumed = make_resumable(_documents(length_grouping=16)).train_dataloader()
    resumed.load_state_dict(state)  # type: ignore[attr-defined]
    got = [x for x, _ in itertools.islice(iter(resumed), 3)]
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))


def test_lightning_injects_a_distributed_sampler_into_the_grouped_batches() -> None:
    """Under DDP Lightning re-creates the batch sampler around a DistributedSampler (its own code,
    called as the Trainer calls it): the ranks' batches split the documents between them."""
    from lightning.fabric.utilities.data import _replace_dunder_methods
    from lightning.pytorch.utilities.data import _update_dataloader
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

    dm = _documents(length_grouping=16)
    # What the Trainer's _request_dataloader wraps every train_dataloader() call in.
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = dm.train_dataloader()
    ranks = []
    for rank in (0, 1):
        sampler = DistributedSampler(loader.dataset, num_replicas=2, rank=rank, shuffle=True, seed=0)
        ranks.append([i for b in _update_dataloader(loader, sampler).batch_sampler for i in b])  # type: ignore[union-attr]
    assert ranks[0] and ranks[1] and not set(ranks[0]) & set(ranks[1])


# -- data.path: any UTF-8 text, whatever its name; binary skipped by content ---------------------------
def test_every_text_file_is_read_whatever_its_name(tmp_path: Path) -> None:
    from runner.data.reading.sources import resolve

    (tmp_path / "notes").write_text("plain notes without an extension\n" * 20)
    (tmp_path / "main.rs").write_text("fn main() { println!(\"héllo\"); }\n" * 20)
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)) * 8)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1") * 20)  # not UTF-8
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n" * 50)  # hidden directories are not the user's text
    (tmp_path / "empty").write_text("")
    docs = read_documents(tmp_path, max_bytes=None)
    assert sorted(d[:10] for d in docs) == [b"fn main() ", b"plain note"]
    source = resolve(str(tmp_path))
    assert source.kind == "text" and sorted(f.name for f in source.files) == ["main.rs", "notes"]
    (tmp_path / "train.jsonl").write_text('{"text": "a json line"}\n' * 20)  # among text: read as text
    assert resolve(str(tmp_path)).kind == "text" and len(resolve(str(tmp_path)).files) == 3
    assert resolve(str(tmp_path / "*.jsonl")).kind == "json"  # a glob reads the table's rows
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "part0.jsonl").write_text('{"text": "a json line"}\n' * 20)
    (tables / "README.md").write_text("what these rows are\n")
    assert resolve(str(tables)).files == (tables / "part0.jsonl",)  # a folder of tables: their rows


def test_a_single_file_without_extension_is_read(tmp_path: Path) -> None:
    (tmp_path / "corpus").write_text("some text " * 100)
    assert read_documents(tmp_path / "corpus", max_bytes=None) == [b"some text " * 100]


def test_binary_only_path_is_refused_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(bytes(range(256)) * 64)
    with pytest.raises(FileNotFoundError, match=r"no non-empty text files.*binary or not UTF-8.*data.path=null"):
        read_documents(tmp_path, max_bytes=None)


def test_utf8_sniffing_accepts_a_character_cut_at_the_head() -> None:
    from runner.data.reading.corpus import is_text

    text = "naïve café ".encode() * 10
    assert is_text(text[:-1]) and is_text(text)  # the last é cut in half: still text
    assert not is_text(b"abc\x00def") and not is_text(b"\xff\xfe\x00a")
