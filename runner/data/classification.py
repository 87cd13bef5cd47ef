"""Labelled text for sequence classifiers: padded variable-length batches, the shape policies' real case.

A batch is ``({"input_ids", "attention_mask"}, labels)``: ids ``[batch, length]`` padded to the shape
policy's length for the batch's longest text (``pad_to``, set by the builder), the mask 1 on real tokens,
one label per text. Texts come from a local file (JSON lines with ``text`` and ``label``, or
``label<TAB>text`` lines) or, by default, from the Python stdlib source: paragraphs labelled by the
package they come from. Tokens are UTF-8 bytes shifted by one (0 pads), or a saved tokenizer's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from runner.config.target_objects import TokenRange
from runner.data.corpus import read_documents, stdlib_dir
from runner.data.padding import PadTo
from runner.data.splits import VAL_PATH, split_documents
from runner.data.tokenizers import check_tokenizer, load_tokenizer, token_range

# The default task: which of these stdlib packages a paragraph of source comes from.
STDLIB_PACKAGES = ("asyncio", "email", "unittest", "xml")
Example = tuple[str, Any]


def read_examples(path: str | None, max_examples: int | None, min_len: int) -> list[Example]:
    """``(text, label)`` pairs from ``path`` (JSON lines or ``label<TAB>text``), or the stdlib default."""
    if path is None:
        return _stdlib_examples(max_examples, min_len)
    examples: list[Example] = []
    for n, line in enumerate(Path(path).expanduser().read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                row = json.loads(line)
                examples.append((str(row["text"]), row["label"]))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"data.path={path}, line {n}: not a JSON object with text and label ({e})") from e
        else:
            label, sep, text = line.partition("\t")
            if not sep:
                raise ValueError(f"data.path={path}, line {n}: neither JSON nor label<TAB>text")
            examples.append((text, label))
        if max_examples is not None and len(examples) >= max_examples:
            break
    return [(t, lab) for t, lab in examples if len(t.encode()) >= min_len]


def _stdlib_examples(max_examples: int | None, min_len: int) -> list[Example]:
    per_class = None if max_examples is None else max(1, max_examples // len(STDLIB_PACKAGES))
    examples: list[Example] = []
    for package in STDLIB_PACKAGES:
        docs = read_documents(stdlib_dir() / package, max_bytes=None)
        paragraphs = [p for d in docs for p in d.split(b"\n\n") if len(p.strip()) >= min_len]
        random.Random(package).shuffle(paragraphs)
        examples += [(p.decode("utf-8", "replace"), package) for p in paragraphs[:per_class]]
    return examples


def label_ids(labels: Sequence[Any]) -> dict[Any, int]:
    """Label -> class id: integer labels (``3``, ``"3"``) are their own ids; others are numbered in sorted order."""
    if all(isinstance(x, int) or (isinstance(x, str) and x.strip().lstrip("-").isdigit()) for x in labels):
        return {x: int(x) for x in labels}
    index = {name: i for i, name in enumerate(sorted({str(x) for x in labels}))}
    return {x: index[str(x)] for x in labels}


@dataclass(frozen=True)
class ClassifyCollate:
    """Pads a list of ``(ids, label)`` to ``pad_to(longest)`` with ``pad_id``; the mask marks real tokens."""

    pad_to: PadTo
    pad_id: int

    def __call__(self, items: list[tuple[torch.Tensor, int]]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        t = self.pad_to(max(len(ids) for ids, _ in items))
        input_ids = torch.full((len(items), t), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(items), t, dtype=torch.long)
        for row, (ids, _) in enumerate(items):
            input_ids[row, :len(ids)] = ids
            mask[row, :len(ids)] = 1
        labels = torch.tensor([label for _, label in items], dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": mask}, labels


class TextClassificationDataModule(L.LightningDataModule):
    """Labelled text in padded variable-length batches (module docstring); split train/val by a seeded
    shuffle, so the split is the same on every run and every rank."""

    def __init__(self, path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                 num_classes: int = 4,
                 seq_len: int = 128, min_len: int = 16, batch_size: int = 16, max_examples: int | None = 20_000,
                 val_fraction: float = 0.1, seed: int = 0, num_workers: int = 0, pad_to: PadTo | None = None) -> None:
        super().__init__()
        self.path, self.val_path, self.tokenizer_path, self.num_classes = path, val_path, tokenizer, num_classes
        self.seq_len, self.min_len, self.batch_size = seq_len, min_len, batch_size
        self.max_examples, self.val_fraction, self.seed = max_examples, val_fraction, seed
        self.num_workers = num_workers
        self.pad_to = pad_to or PadTo()
        self._train: list[tuple[torch.Tensor, int]] | None = None
        self._val: list[tuple[torch.Tensor, int]] | None = None
        self._pad_id = 0
        self.split_how = ""

    @staticmethod
    def check_arguments(path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                        num_classes: int = 4, min_len: int = 16, max_examples: int | None = 20_000,
                        **_: Any) -> str | None:
        """What is wrong with these arguments, in one paragraph, before anything is written (None: nothing)."""
        if (message := check_tokenizer(tokenizer)) is not None:
            return message
        for key, where in (("data.path", path), ("data.val_path", val_path)):
            if where is None or not Path(where).expanduser().exists():  # a missing path: the existence check names it
                continue
            if not Path(where).expanduser().is_file():
                return (f"{key}={where} is a directory. Give a file of labelled text: JSON lines "
                        '({"text": ..., "label": ...}) or label<TAB>text lines; or drop data.path for the stdlib task.')
            try:
                examples = read_examples(where, max_examples, min_len)
            except (ValueError, UnicodeDecodeError) as e:
                return f"{e}. Each line is a JSON object with text and label, or label<TAB>text (UTF-8)."
            if not examples:
                return f"{key}={where} holds no text of at least data.min_len={min_len} bytes."
            ids = label_ids([lab for _, lab in examples])
            if max(ids.values()) >= num_classes or min(ids.values()) < 0:
                return (f"{key}={where} has {len(set(ids.values()))} labels (ids {min(ids.values())}.."
                        f"{max(ids.values())}) but data.num_classes={num_classes}: set data.num_classes="
                        f"{max(ids.values()) + 1} (the model's num_labels follows it).")
        return None

    @staticmethod
    def token_range(tokenizer: str | None = None, **_: Any) -> TokenRange | None:
        """The ids this data gives the model (the vocabulary check compares them with the model's embedding)."""
        return token_range(tokenizer, offset=1)

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        examples = read_examples(self.path, self.max_examples, self.min_len)
        val_examples = read_examples(self.val_path, self.max_examples, self.min_len) if self.val_path else []
        ids = label_ids([lab for _, lab in examples + val_examples])
        encode = load_tokenizer(self.tokenizer_path, offset=1)
        self._pad_id = encode.pad_id
        encoded = [(torch.from_numpy(t[:self.seq_len].astype("int64")), ids[lab])
                   for t, (_, lab) in zip(encode([text for text, _ in examples + val_examples], self.seq_len),
                                          examples + val_examples, strict=True)]
        if val_examples:
            self.split_how = VAL_PATH
            self._train, self._val = encoded[:len(examples)], encoded[len(examples):]
        else:
            split = split_documents(len(encoded), self.val_fraction, self.seed)
            self.split_how = split.how.replace("document", "row")
            self._val, self._train = [encoded[i] for i in split.val], [encoded[i] for i in split.train]
        if len(self._train) < self.batch_size:
            raise ValueError(f"data: {len(self._train)} training examples, fewer than data.batch_size="
                             f"{self.batch_size}; give more text or lower data.batch_size.")

    def _loader(self, items: list[tuple[torch.Tensor, int]] | None, shuffle: bool) -> DataLoader:
        assert items is not None, "setup() first"
        g = torch.Generator().manual_seed(self.seed)
        return DataLoader(items, batch_size=self.batch_size, shuffle=shuffle, drop_last=shuffle, generator=g,  # type: ignore[arg-type]
                          collate_fn=ClassifyCollate(self.pad_to, self._pad_id), num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._val, shuffle=False)
