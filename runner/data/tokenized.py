"""Text tokenized by a saved tokenizer, for a causal LM loaded from ``model.path``.

The corpus is read as ``data=text`` reads it (``runner.data.corpus``: a directory or file of UTF-8 text,
the Python stdlib source by default). ``packed``: fixed windows over the concatenated token stream.
``documents``: one sequence per document (files split at ``separator``, cut at ``seq_len``), each batch
padded to the shape policy's length with the tokenizer's pad id (its eos id when it has none); padded
targets are ``IGNORE_INDEX``, so the loss never counts them, whatever id pads the inputs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from runner.config.targets import Batching
from runner.data.corpus import read_documents
from runner.data.text import IGNORE_INDEX, PackedWindows, PadTo


@dataclass(frozen=True)
class TokenPadCollate:
    """Pads ``seq_len + 1``-token chunks to ``pad_to(longest)``: inputs with ``pad_id``, targets with IGNORE_INDEX."""

    pad_to: PadTo
    pad_id: int

    def __call__(self, chunks: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.pad_to(max(len(c) for c in chunks) - 1)
        x = torch.full((len(chunks), t), self.pad_id, dtype=torch.long)
        y = torch.full((len(chunks), t), IGNORE_INDEX, dtype=torch.long)
        for row, c in enumerate(chunks):
            n = len(c) - 1
            x[row, :n] = c[:-1]
            y[row, :n] = c[1:]
        return x, y


class TokenizedTextDataModule(L.LightningDataModule):
    """A corpus tokenized by the tokenizer saved in ``tokenizer`` (local files only)."""

    def __init__(self, tokenizer: str, path: str | None = None, batching: Batching | str = Batching.packed,
                 seq_len: int = 256, min_len: int = 16, separator: str | None = "\n\n", batch_size: int = 16,
                 max_bytes: int | None = 4_000_000,
                 val_fraction: float = 0.05, seed: int = 0, num_workers: int = 0, pad_to: PadTo | None = None) -> None:
        super().__init__()
        self.tokenizer_path, self.path, self.seq_len, self.min_len = tokenizer, path, seq_len, min_len
        self.separator = separator
        self.batching = Batching(batching) if isinstance(batching, str) else batching
        self.batch_size, self.max_bytes, self.val_fraction = batch_size, max_bytes, val_fraction
        self.seed, self.num_workers = seed, num_workers
        self.pad_to = pad_to or PadTo()
        self.pad_id = 0
        self._train: Dataset | None = None
        self._val: Dataset | None = None

    @staticmethod
    def check_arguments(tokenizer: str | None = None, **_: Any) -> str | None:
        """What is wrong with these arguments, in one paragraph, before anything is written (None: nothing)."""
        if not tokenizer:
            return ("data.tokenizer is empty: give the directory a tokenizer was saved to (usually the model's "
                    "model.path), or use data=text (UTF-8 bytes) with a model built from its configuration.")
        if not Path(tokenizer).expanduser().is_dir():
            return (f"data.tokenizer={tokenizer} is not a directory. Give the directory a tokenizer was saved to "
                    "(tokenizer.save_pretrained(DIR), usually model.path).")
        return None

    def check(self) -> None:
        """Fail fast (before any model is built) if the data cannot be read."""
        read_documents(self.path, max_bytes=1)

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(Path(self.tokenizer_path).expanduser()), local_files_only=True)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = int(pad) if pad is not None else 0
        docs = read_documents(self.path, self.max_bytes)
        if self.separator and self.batching is Batching.documents:
            docs = [part for d in docs for part in d.split(self.separator.encode()) if part.strip()]
        order = list(range(len(docs)))
        random.Random(self.seed).shuffle(order)
        n_val = max(1, round(len(docs) * self.val_fraction)) if len(docs) > 1 else 0
        split = {"val": [docs[i] for i in order[:n_val]] or docs[:1], "train": [docs[i] for i in order[n_val:]] or docs}
        ids = {k: [tokenizer(d.decode("utf-8", "replace"))["input_ids"] for d in v] for k, v in split.items()}
        self._train, self._val = self._dataset(ids["train"]), self._dataset(ids["val"])
        if len(self._train) == 0:  # type: ignore[arg-type]
            raise ValueError(f"data: no training sequences of seq_len={self.seq_len} tokens; lower data.seq_len "
                             "or raise data.max_bytes.")

    def _dataset(self, docs: list[list[int]]) -> Dataset:
        if self.batching is Batching.packed:
            return PackedWindows(torch.tensor([t for d in docs for t in d], dtype=torch.long), self.seq_len)
        step = self.seq_len + 1
        chunks = [torch.tensor(d[i:i + step], dtype=torch.long) for d in docs for i in range(0, len(d), step)]
        return [c for c in chunks if len(c) > self.min_len]  # type: ignore[return-value]

    def _loader(self, ds: Dataset | None, shuffle: bool) -> DataLoader:
        assert ds is not None, "setup() first"
        collate = TokenPadCollate(self.pad_to, self.pad_id) if self.batching is Batching.documents else None
        g = torch.Generator().manual_seed(self.seed)
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, drop_last=shuffle, collate_fn=collate,
                          generator=g, num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._val, shuffle=False)
