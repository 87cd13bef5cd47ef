"""Prepared data as flat arrays on disk, read through memory maps: what a batch reads is all a process touches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

INFO = "info.json"
VERSION = 1  # The layout of a store's files; a new one changes every store's name


def token_dtype(largest_id: int) -> np.dtype:
    """The narrowest dtype that holds ids up to ``largest_id``: a byte, two bytes, or four."""
    if largest_id < 1 << 8:
        return np.dtype(np.uint8)
    if largest_id < 1 << 16:
        return np.dtype(np.uint16)
    return np.dtype(np.int32)


class Mapped:
    """A read-only 1-D array in a file, mapped on first use."""

    def __init__(self, path: Path, dtype: Any, length: int) -> None:
        self.path, self.dtype, self.length = Path(path), np.dtype(dtype), int(length)
        self._array: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_array": None}

    @property
    def array(self) -> np.ndarray:
        """The whole array, mapped (an empty file cannot be mapped: an empty array)."""
        if self._array is None:
            self._array = (np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.length,)) if self.length
                           else np.zeros(0, dtype=self.dtype))
        return self._array

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: Any) -> Any:
        return self.array[index]

    def read(self, a: int, b: int) -> np.ndarray:
        """Values ``[a, b)`` read from the file (not mapped: the pages do not stay in this process)."""
        if b <= a:
            return np.zeros(0, dtype=self.dtype)
        return np.fromfile(self.path, dtype=self.dtype, count=b - a, offset=a * self.dtype.itemsize)


def spans_blocks(values: Mapped, starts: np.ndarray, ends: np.ndarray, block: int = 1 << 24) -> Iterator[np.ndarray]:
    """The values within ``[starts[i], ends[i])`` (spans, in any order, not overlapping), a block of the file at a time,
    read in the file's order with file reads: a pass over a corpus larger than memory holds one block."""
    order = np.argsort(starts, kind="stable")
    starts, ends = np.asarray(starts)[order], np.asarray(ends)[order]
    if not len(starts):
        return
    for a in range(int(starts[0]), int(ends.max()), block):
        b = a + block
        first, last = np.searchsorted(ends, a, side="right"), np.searchsorted(starts, b, side="left")
        if first >= last:
            continue
        data = values.read(a, min(b, len(values)))
        edges = np.zeros(len(data) + 1, dtype=np.int64)
        np.add.at(edges, np.clip(starts[first:last] - a, 0, len(data)), 1)
        np.add.at(edges, np.clip(ends[first:last] - a, 0, len(data)), -1)
        yield data[np.cumsum(edges[:-1]) > 0]


class Ragged:
    """A ragged column: ``values`` (flat), ``offsets`` (``int64``, rows + 1)."""

    def __init__(self, values: Mapped, offsets: Mapped) -> None:
        self.values, self.offsets = values, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Where each row starts and ends in ``values`` (``int64`` arrays, read into memory: 16 bytes a row)."""
        offsets = np.asarray(self.offsets[:], dtype=np.int64)
        return offsets[:-1], offsets[1:]


class StoreWriter:
    """Writes a store into ``directory``: ``ragged`` and ``rows`` name each column and its dtype; ``append`` adds rows,
    ``finish`` writes ``info.json``."""

    def __init__(self, directory: Path, ragged: dict[str, Any], rows: dict[str, Any] | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ragged = {name: np.dtype(d) for name, d in ragged.items()}
        self.row_dtypes = {name: np.dtype(d) for name, d in (rows or {}).items()}
        self.rows = 0
        self._lengths = dict.fromkeys(self.ragged, 0)
        self._files = {f"{name}.{part}": (self.directory / f"{name}.{part}").open("wb")
                       for name in self.ragged for part in ("values", "offsets")}
        self._files.update({f"{name}.rows": (self.directory / f"{name}.rows").open("wb") for name in self.row_dtypes})
        for name in self.ragged:
            self._files[f"{name}.offsets"].write(np.zeros(1, np.int64).tobytes())

    def append(self, ragged: dict[str, tuple[np.ndarray, np.ndarray]],
               rows: dict[str, np.ndarray] | None = None) -> None:
        """Rows given as, per ragged column, ``(values, lengths)`` (the rows' values one after another, each row's
        count), and per row column its values; every column of the store, the same number of rows in each."""
        n = None
        for name, dtype in self.ragged.items():
            values, lengths = ragged[name]
            lengths = np.asarray(lengths, dtype=np.int64)
            if int(lengths.sum()) != len(values):
                raise ValueError(f"{name}: {len(values)} values, but the lengths add up to {int(lengths.sum())}")
            n = len(lengths) if n is None else n
            if len(lengths) != n:
                raise ValueError(f"{name}: {len(lengths)} rows, not {n}")
            checked = np.asarray(values)
            if len(checked) and checked.dtype != dtype and (checked.min() < 0 or checked.max() > np.iinfo(dtype).max):
                raise ValueError(f"{name}: values outside {dtype} ({checked.min()}..{checked.max()})")
            self._files[f"{name}.values"].write(checked.astype(dtype, copy=False).tobytes())
            self._files[f"{name}.offsets"].write((self._lengths[name] + np.cumsum(lengths)).tobytes())
            self._lengths[name] += len(values)
        for name, dtype in self.row_dtypes.items():
            values = np.asarray((rows or {})[name])
            n = len(values) if n is None else n
            if len(values) != n:
                raise ValueError(f"{name}: {len(values)} rows, not {n}")
            self._files[f"{name}.rows"].write(values.astype(dtype, copy=False).tobytes())
        self.rows += n or 0

    def flush(self) -> None:
        """What was appended, written out."""
        for f in self._files.values():
            f.flush()

    def finish(self, meta: dict[str, Any]) -> None:
        """Closes the files (flushed to disk) and writes ``info.json``: the store is complete."""
        import os

        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        info = {"version": VERSION, "rows": self.rows,
                "ragged": {name: {"dtype": d.str, "values": self._lengths[name]} for name, d in self.ragged.items()},
                "row_columns": {name: d.str for name, d in self.row_dtypes.items()}, "meta": meta}
        (self.directory / INFO).write_text(json.dumps(info, indent=1))

    def abandon(self) -> None:
        """Closes the files of a store that will not be finished (its directory is the caller's to remove)."""
        for f in self._files.values():
            f.close()


class Store:
    """A finished store in ``directory``, its files mapped read-only."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        info = json.loads((self.directory / INFO).read_text())
        self.rows: int = info["rows"]
        self.meta: dict[str, Any] = info["meta"]
        self._info = info

    def ragged(self, name: str) -> Ragged:
        """The ragged column ``name``."""
        spec = self._info["ragged"][name]
        return Ragged(Mapped(self.directory / f"{name}.values", spec["dtype"], spec["values"]),
                      Mapped(self.directory / f"{name}.offsets", np.int64, self.rows + 1))

    def column(self, name: str) -> Mapped:
        """The row column ``name``."""
        return Mapped(self.directory / f"{name}.rows", self._info["row_columns"][name], self.rows)
