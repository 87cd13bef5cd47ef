"""Training sequences cut from token ids that stay where they are (in memory, or memory-mapped Arrow files)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import Dataset


class Tokens(Protocol):
    """Flat token ids: ``len`` and ``tokens[a:b]`` as a numpy array."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: slice) -> np.ndarray: ...


class Spans:
    """``[starts[i], ends[i])`` of a flat token sequence, in order: the documents (or rows) a split keeps."""

    def __init__(self, starts: Any, ends: Any) -> None:
        self.starts = np.asarray(starts, dtype=np.int64)
        self.ends = np.asarray(ends, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def lengths(self) -> np.ndarray:
        return self.ends - self.starts

    def take(self, index: Any) -> Spans:
        """The spans at ``index`` (a list or array of positions), in that order."""
        index = np.asarray(index, dtype=np.int64)
        return Spans(self.starts[index], self.ends[index])

    def chunked(self, size: int, min_len: int) -> Spans:
        """Each span cut into pieces of at most ``size`` ids (the last one shorter); pieces of ``min_len`` ids or fewer
        dropped."""
        lengths = self.lengths
        pieces = np.maximum(1, -(-lengths // size))
        starts = np.repeat(self.starts, pieces) + size * (np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces)
                                                                                           - pieces, pieces))
        ends = np.minimum(starts + size, np.repeat(self.ends, pieces))
        keep = ends - starts > min_len
        return Spans(starts[keep], ends[keep])


class Stream:
    """The ids of ``spans`` of ``tokens``, read as one sequence (a window may cross from one span to the next)."""

    def __init__(self, tokens: Tokens, spans: Spans) -> None:
        self.tokens, self.spans = tokens, spans
        self.offsets = np.concatenate([[0], np.cumsum(spans.lengths)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def read(self, a: int, b: int) -> np.ndarray:
        """Ids ``[a, b)`` of the stream."""
        i = int(np.searchsorted(self.offsets, a, side="right")) - 1
        parts = []
        while a < b:
            stop = min(b, int(self.offsets[i + 1]))
            start = int(self.spans.starts[i]) + a - int(self.offsets[i])
            parts.append(self.tokens[start:start + stop - a])
            a, i = stop, i + 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


class Shifted:
    """``tokens``' ids plus ``offset`` (a classifier's byte ids start at 1: 0 pads), read as int64."""

    def __init__(self, tokens: Tokens, offset: int) -> None:
        self.tokens, self.offset = tokens, offset

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: slice) -> np.ndarray:
        return np.asarray(self.tokens[index], dtype=np.int64) + self.offset


def as_long(ids: np.ndarray) -> torch.Tensor:
    """Ids of any integer dtype as an int64 tensor (a copy: the source may be a read-only memory map)."""
    return torch.from_numpy(ids.astype(np.int64))


class PackedWindows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Non-overlapping windows of ``seq_len + 1`` ids over a stream: ``(inputs, targets)``, targets shifted by one."""

    def __init__(self, stream: Stream, seq_len: int) -> None:
        self.stream, self.seq_len = stream, seq_len

    def __len__(self) -> int:
        return max(0, (len(self.stream) - 1) // self.seq_len)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = as_long(self.stream.read(i * self.seq_len, (i + 1) * self.seq_len + 1))
        return chunk[:-1], chunk[1:]


class Chunks(Dataset[torch.Tensor]):
    """One sequence of ids per span (each at most ``seq_len + 1`` long: see ``Spans.chunked``)."""

    def __init__(self, tokens: Tokens, spans: Spans) -> None:
        self.tokens, self.spans = tokens, spans

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def lengths(self) -> list[int]:
        return self.spans.lengths.tolist()

    def __getitem__(self, i: int) -> torch.Tensor:
        return as_long(self.tokens[int(self.spans.starts[i]):int(self.spans.ends[i])])
