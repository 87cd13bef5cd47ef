"""Local data: stdlib corpus, deterministic split, packed and per-document batches, padding masked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runner.config.targets import Batching
from runner.data.corpus import read_documents, stdlib_dir, unigram_bits_per_byte
from runner.data.synthetic import SyntheticDataModule
from runner.data.text import IGNORE_INDEX, PadTo, TextDataModule
from runner.training.module import lm_loss


def test_stdlib_corpus_is_real_text_in_a_stable_order() -> None:
    docs = read_documents(None, max_bytes=200_000)
    assert len(docs) > 5 and sum(map(len, docs)) >= 200_000
    assert docs == read_documents(None, max_bytes=200_000)
    assert stdlib_dir().is_dir()
    assert 3.0 < unigram_bits_per_byte(docs) < 6.0  # source code bytes, not noise (8 bits)


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
    assert torch.allclose(lm_loss(logits, y), lm_loss(logits[:, :3], y[:, :3]))


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
