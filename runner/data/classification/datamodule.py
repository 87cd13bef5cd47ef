"""Labelled text for sequence classifiers: padded variable-length batches, the shape policies' real case."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from runner.config.target_objects import TokenRange
from runner.data.classification.labelled import Labelled, read_labelled
from runner.data.classification.labels import LabelMap, label_map, row_ids
from runner.data.reading.sources import DataError, names_something, own_validation, val_path_refusal
from runner.data.sequences.padding import PadTo, seeded_loader
from runner.data.sequences.windows import Chunks, Shifted, Spans, Tokens
from runner.data.splits import split_documents, val_how
from runner.data.summary import DataSummary, SplitData
from runner.data.tokens.encoding import IDS, LENGTH, encode
from runner.data.tokens.tokenizers import ByteTokens, Tokenizer, check_tokenizer, load_tokenizer, token_range
from runner.data.traits import DataTraits, ValMetric


class Rows(Chunks):
    """``(ids, label)`` of chosen rows: their ids read from ``tokens`` at ``spans``."""

    def __init__(self, tokens: Tokens, spans: Spans, labels: np.ndarray) -> None:
        super().__init__(tokens, spans)
        self.labels = labels

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:  # type: ignore[override]
        return super().__getitem__(i), int(self.labels[i])


@dataclass
class Encoded:
    """One setting's rows as ids: the tokens, each kept row's span (cut at seq_len) and class id, how many were cut."""

    tokens: Tokens
    spans: Spans
    labels: np.ndarray
    truncated: int
    empty: int  # Rows whose text gave no ids (left out)


def encode_labelled(part: Labelled, tokenizer: Tokenizer, labels: LabelMap, text_column: str, label_column: str,
                    seq_len: int, what: str) -> Encoded:
    """The kept rows of ``part`` tokenized (from the token store), cut at ``seq_len``, empty ones left out."""
    store = encode(part.rows, text_column, tokenizer, max_len=seq_len, what=what)
    ids = store.ragged(IDS)
    offset = tokenizer.offset if isinstance(tokenizer, ByteTokens) else 0
    tokens: Tokens = Shifted(ids.values, offset) if offset else ids.values
    spans = Spans(*ids.bounds())
    full = spans.lengths if isinstance(tokenizer, ByteTokens) else np.asarray(store.column(LENGTH)[:])
    spans = Spans(spans.starts, np.minimum(spans.ends, spans.starts + seq_len))  # bytes are stored whole
    keep = part.keep[spans.lengths[part.keep] > 0]
    return Encoded(tokens, spans.take(keep), row_ids(part.rows, label_column, labels)[keep],
                   int((full[keep] > seq_len).sum()), len(part.keep) - len(keep))


def summarize(parts: list[Labelled], encoded: list[Encoded], labels: LabelMap, train: int, val: int,
              split: str) -> DataSummary:
    """The data section of labelled rows: ``parts`` as read, ``encoded`` as used (training's first)."""
    dropped = {("data.val_path: " if i else "") + k: n for i, p in enumerate(parts) for k, n in p.dropped.items()}
    empty = sum(e.empty for e in encoded)
    if empty:
        dropped["no token ids"] = empty
    counts = np.bincount(np.concatenate([e.labels for e in encoded]), minlength=labels.count)
    return DataSummary("; ".join(p.source for p in parts), sum(p.files for p in parts), sum(len(p.rows) for p in parts),
                       sum(int(e.spans.lengths.sum()) for e in encoded), train, val, split,
                       truncated=sum(e.truncated for e in encoded), used=sum(len(e.spans) for e in encoded),
                       dropped=dropped, label_counts={k: int(counts[i]) for k, i in labels.label2id.items()})


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


class TextClassificationDataModule(SplitData):
    """Labelled text in padded variable-length batches."""

    def __init__(self, path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                 text_column: str = "text", label_column: str = "label", num_classes: int = 4,
                 seq_len: int = 128, min_len: int = 16, batch_size: int = 16, max_examples: int | None = 20_000,
                 val_fraction: float = 0.1, seed: int = 0, num_workers: int = 0, pad_to: PadTo | None = None) -> None:
        super().__init__()
        self.path, self.val_path, self.tokenizer_path, self.num_classes = path, val_path, tokenizer, num_classes
        self.text_column, self.label_column = text_column, label_column
        self.seq_len, self.min_len, self.batch_size = seq_len, min_len, batch_size
        self.max_examples, self.val_fraction, self.seed = max_examples, val_fraction, seed
        self.num_workers = num_workers
        self.pad_to = pad_to or PadTo()
        self._train: Rows | None = None
        self._val: Rows | None = None
        self._pad_id = 0
        self.labels: LabelMap | None = None

    @staticmethod
    def read(path: str | None = None, val_path: str | None = None, text_column: str = "text",
             label_column: str = "label", min_len: int = 16, max_examples: int | None = 20_000,
             **_: Any) -> tuple[Labelled, Labelled | None, LabelMap]:
        """The rows of ``path`` and ``val_path`` and the map of their labels; ``DataError`` when unusable."""
        if (refusal := val_path_refusal(path, val_path)) is not None:
            raise DataError(refusal)
        train = read_labelled(path, "data.path", text_column, label_column, max_examples, min_len)
        val_path = val_path or own_validation(path)
        val = None if val_path is None else read_labelled(val_path, "data.val_path", text_column, label_column,
                                                          max_examples, min_len)
        values = Counter(train.values) + Counter(val.values if val else {})
        return train, val, label_map(dict(values), f"data.label_column={label_column} of data.path={path}")

    @staticmethod
    def check_arguments(tokenizer: str | None = None, batch_size: int = 16, **fields: Any) -> str | None:
        """What is wrong with these arguments, in one paragraph, before anything is written (None: nothing)."""
        if (message := check_tokenizer(tokenizer)) is not None:
            return message
        if not all(names_something(fields.get(k)) for k in ("path", "val_path")):
            return None  # a missing path: the existence check names it
        try:
            train, val, _ = TextClassificationDataModule.read(**fields)
        except DataError as e:
            return str(e)
        min_len = fields.get("min_len", 16)
        for key, part in (("data.path", train), ("data.val_path", val)):
            if part is not None and len(part.keep) == 0:
                return (f"{key}={part.given} has no row with a text of at least data.min_len="
                        f"{min_len} bytes. Lower data.min_len, or point {key} at other rows.")
        n_train = len(train.keep) if val else len(train.keep) - max(1, round(len(train.keep) *
                                                                             fields.get("val_fraction", 0.1)))
        if n_train < batch_size:
            return (f"data.path={fields.get('path')} leaves {n_train} training rows, fewer than data.batch_size="
                    f"{batch_size}: an empty training split. Give more rows, or lower data.batch_size (or "
                    "data.val_fraction).")
        return None

    @staticmethod
    def label_count(**fields: Any) -> tuple[int, str] | None:
        """How many classes the rows hold (ids ``0 .. n - 1``) and a few of their labels; None when they cannot be read
        (``check_arguments`` says why)."""
        if not all(names_something(fields.get(k)) for k in ("path", "val_path")):
            return None
        try:
            _, _, labels = TextClassificationDataModule.read(**fields)
        except DataError:
            return None
        names = list(labels.label2id)
        return labels.count, ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")

    @staticmethod
    def token_range(tokenizer: str | None = None, **_: Any) -> TokenRange | None:
        """The ids this data gives the model (the vocabulary check compares them with the model's embedding)."""
        return token_range(tokenizer, offset=1)

    @staticmethod
    def traits(**_: Any) -> DataTraits:
        """Accuracy; every batch padded to its longest text, so shapes vary."""
        return DataTraits(ValMetric.accuracy, pads_per_batch=True, shapes_vary=True)

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        train, val, self.labels = self.read(self.path, self.val_path, self.text_column, self.label_column,
                                            self.min_len, self.max_examples)
        tokenizer = load_tokenizer(self.tokenizer_path, offset=1)
        self._pad_id = tokenizer.pad_id
        own = None if self.val_path else own_validation(self.path)
        encoded = [encode_labelled(part, tokenizer, self.labels, self.text_column, self.label_column, self.seq_len,
                                   what=f"{key}={where}")
                   for key, where, part in (("data.path", self.path, train), ("data.val_path", self.val_path or own,
                                                                              val))
                   if part is not None]
        rows = encoded[0]
        if len(encoded) > 1:
            self.split_how = val_how(self.val_path, own)
            self._train = Rows(rows.tokens, rows.spans, rows.labels)
            self._val = Rows(encoded[1].tokens, encoded[1].spans, encoded[1].labels)
        else:
            split = split_documents(len(rows.spans), self.val_fraction, self.seed)
            self.split_how = split.how.replace("document", "row")
            self._train = Rows(rows.tokens, rows.spans.take(split.train), rows.labels[split.train])
            self._val = Rows(rows.tokens, rows.spans.take(split.val), rows.labels[split.val])
        parts = [part for part in (train, val) if part is not None]
        self.summary = summarize(parts, encoded, self.labels, len(self._train), len(self._val), self.split_how)
        self.summary.say(self.seq_len)
        if len(self._train) < self.batch_size:
            raise ValueError(f"data: {len(self._train)} training examples, fewer than data.batch_size="
                             f"{self.batch_size}; give more text or lower data.batch_size.")

    def _loader(self, rows: Rows, shuffle: bool) -> DataLoader:
        return seeded_loader(rows, self.batch_size, self.seed, self.num_workers, shuffle,
                             collate_fn=ClassifyCollate(self.pad_to, self._pad_id))
