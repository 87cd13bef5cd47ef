"""Which examples share a row: best-fit decreasing, the classic bin-packing heuristic, on arrays."""

# All examples of one length go at once: the row with the least room r that holds the length takes r // length of
# them before the next such row does, so a run of rows is filled by one numpy call. Deterministic, and the same rows
# as one example at a time (tests/test_packing_units.py).

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence

import numpy as np


class PackRows:
    """Rows of example indices: row ``r`` is ``order[starts[r]:starts[r + 1]]``, its longest example first."""

    def __init__(self, order: np.ndarray, starts: np.ndarray) -> None:
        self.order, self.starts = np.asarray(order, dtype=np.int64), np.asarray(starts, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, r: int) -> np.ndarray:
        return self.order[self.starts[r]:self.starts[r + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[r] for r in range(len(self)))

    def tolist(self) -> list[list[int]]:
        return [row.tolist() for row in self]


class _Stack:
    """Open rows with one amount of room, the latest on top, as chunks of row ids."""

    def __init__(self) -> None:
        self.chunks: list[np.ndarray] = []
        self.size = 0

    def push(self, rows: np.ndarray) -> None:
        if len(rows):
            self.chunks.append(rows)
            self.size += len(rows)

    def pop(self, n: int) -> np.ndarray:
        """The top ``n`` rows, the top first."""
        out = []
        self.size -= n
        while n:
            top = self.chunks[-1]
            if len(top) <= n:
                out.append(top[::-1])
                self.chunks.pop()
                n -= len(top)
            else:
                out.append(top[len(top) - n:][::-1])
                self.chunks[-1] = top[:len(top) - n]
                n = 0
        return np.concatenate(out) if len(out) > 1 else out[0]


def pack_rows(lengths: Sequence[int] | np.ndarray, capacity: int) -> PackRows:
    """Rows whose ``lengths`` sum to at most ``capacity`` each."""
    lengths = np.asarray(lengths, dtype=np.int64)
    bad = np.flatnonzero((lengths < 1) | (lengths > capacity))
    if len(bad):
        raise ValueError(f"example {bad[0]} has length {lengths[bad[0]]}, outside 1..{capacity}")
    if not len(lengths):
        return PackRows(np.zeros(0, np.int64), np.zeros(1, np.int64))
    order = np.argsort(-lengths, kind="stable")
    ordered = lengths[order]
    row_of = np.empty(len(lengths), dtype=np.int64)  # by position in ``order``
    stacks: dict[int, _Stack] = {}
    rooms: list[int] = []  # the amounts of room open rows have, ascending
    opened = 0

    def push(room: int, rows: np.ndarray) -> None:
        if room > 0 and len(rows):
            if room not in stacks:
                stacks[room] = _Stack()
                insort(rooms, room)
            stacks[room].push(rows)

    edges = np.concatenate([[0], np.flatnonzero(np.diff(ordered)) + 1, [len(ordered)]]).tolist()
    for at, end in zip(edges[:-1], edges[1:], strict=True):
        size = int(ordered[at])
        while at < end:
            k = end - at
            j = bisect_left(rooms, size)
            if j < len(rooms):  # the least room that holds it, in rows already open
                room = rooms[j]
                each = room // size
                stack = stacks[room]
                rows = stack.pop(min(-(-k // each), stack.size))
                if not stack.size:
                    del stacks[room]
                    rooms.pop(j)
            else:  # new rows
                room = capacity
                each = capacity // size
                rows = np.arange(opened, opened + -(-k // each), dtype=np.int64)
                opened += len(rows)
            placed = min(k, len(rows) * each)
            row_of[at:at + placed] = np.repeat(rows, each)[:placed]
            full = placed // each
            push(room - each * size, rows[:full])
            push(room - (placed - full * each) * size, rows[full:full + 1] if placed > full * each else rows[:0])
            at += placed
    by_row = np.argsort(row_of, kind="stable")  # each row's examples in the order they were placed
    counts = np.bincount(row_of, minlength=opened)
    return PackRows(order[by_row], np.concatenate([[0], np.cumsum(counts)]))


def best_fit_decreasing(lengths: Sequence[int] | np.ndarray, capacity: int) -> list[list[int]]:
    """``pack_rows`` as lists of example indices."""
    return pack_rows(lengths, capacity).tolist()
