"""Which examples share a row: best-fit decreasing, the classic bin-packing heuristic.

Examples are taken longest first; each goes into the open row with the least room that still holds it, or
starts a new row. On many short examples of varied length the rows end up nearly full (the data section reports
the padding share it left). Deterministic: ties go by index, so every rank computes the same rows.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence


def best_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Rows of example indices whose ``lengths`` sum to at most ``capacity`` each, longest example first in each
    row. Every length must be in ``1..capacity``."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    room: list[int] = []  # the distinct amounts of room open rows have, ascending
    rows_with: dict[int, list[int]] = {}  # room -> the open rows that have exactly that much
    rows: list[list[int]] = []
    for i in order:
        n = int(lengths[i])
        if not 0 < n <= capacity:
            raise ValueError(f"example {i} has length {n}, outside 1..{capacity}")
        j = bisect_left(room, n)
        if j < len(room):  # the best fit: the least room that holds it
            left = room[j]
            row = rows_with[left].pop()
            if not rows_with[left]:
                del rows_with[left]
                room.pop(j)
        else:
            left, row = capacity, len(rows)
            rows.append([])
        rows[row].append(i)
        left -= n
        if left > 0:
            if left not in rows_with:
                rows_with[left] = []
                insort(room, left)
            rows_with[left].append(row)
    return rows
