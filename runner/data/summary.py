"""What a data module read, for the run's data section (``data/*``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import lightning as L
from torch.utils.data import DataLoader

log = logging.getLogger(__name__)

TRUNCATED_WARNING = 0.10  # A share of rows cut at ``data.seq_len`` above which the log warns
NULL_TEXT = "null text"  # The reason rows whose text is null (missing) were left out (``data/null_rows``)


@dataclass
class DataSummary:
    """What was read."""

    source: str
    files: int
    rows: int
    tokens: int
    train: int
    val: int
    split: str
    truncated: int | None = None
    used: int = 0  # Rows the truncation share is of (the rows kept)
    dropped: dict[str, int] = field(default_factory=dict)
    label_counts: dict[str, int] | None = None
    unigram_bits: float | None = None

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"data/source": self.source, "data/files": self.files, "data/rows": self.rows,
                               "data/tokens": self.tokens, "data/train_sequences": self.train,
                               "data/val_sequences": self.val, "data/split": self.split}
        if self.truncated is not None:
            out["data/truncated_rows"] = self.truncated
            out["data/truncated_pct"] = round(100 * self.truncated / max(self.used, 1), 2)
        if self.dropped:
            out["data/dropped_rows"] = sum(self.dropped.values())
            out["data/dropped_by"] = "; ".join(f"{setting}: {n}" for setting, n in self.dropped.items())
        nulls = sum(n for reason, n in self.dropped.items() if reason.endswith(NULL_TEXT))
        if nulls:
            out["data/null_rows"] = nulls
        if self.label_counts is not None:
            out["data/label_counts"] = dict(self.label_counts)
        if self.unigram_bits is not None:
            out["data/unigram_bpb"] = round(self.unigram_bits, 4)
        return out

    def say(self, seq_len: int) -> None:
        """Log what was read in one line; warn when more than ``TRUNCATED_WARNING`` of the rows were cut."""
        left_out = f"; left out: {'; '.join(f'{k}: {n}' for k, n in self.dropped.items())}" if self.dropped else ""
        log.info("data: %s: files %d, rows/documents %d, tokens %d; %d training and %d validation sequences (%s)%s",
                 self.source, self.files, self.rows, self.tokens, self.train, self.val, self.split, left_out)
        if self.truncated and self.truncated > TRUNCATED_WARNING * max(self.used, 1):
            log.warning("data: %d of %d rows (%.0f%%) are longer than data.seq_len=%d tokens and were cut there: "
                        "what they say past it is not trained on. Raise data.seq_len (the model's positions must "
                        "cover it), or shorten the texts.", self.truncated, self.used,
                        100 * self.truncated / self.used, seq_len)


class SplitData(L.LightningDataModule):
    """A data module whose ``setup`` builds a training and a validation dataset, and says what it read."""

    _train: Any = None
    _val: Any = None
    summary: DataSummary | None = None
    split_how = ""  # How validation was chosen (``data/split``)

    def own_figures(self) -> dict[str, Any]:
        return {}

    def figures(self) -> dict[str, Any]:
        """What was read (``data/*``), after ``setup``."""
        return {**self.summary.figures(), **self.own_figures()} if self.summary is not None else {}

    def _loader(self, ds: Any, shuffle: bool) -> DataLoader:
        raise NotImplementedError

    def train_dataloader(self) -> DataLoader:
        assert self._train is not None, "setup() first"
        return self._loader(self._train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        assert self._val is not None, "setup() first"
        return self._loader(self._val, shuffle=False)
