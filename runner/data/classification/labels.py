"""A classifier's labels, read from a column of Arrow rows: class ids or class names, never both. Integer labels (``3``,
or ``"3"`` in a CSV or a text file) are their own class ids; names (``"spam"``) are numbered in sorted order."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.data.reading.sources import DataError, Source

INT, NAME = "int", "name"


@dataclass(frozen=True)
class LabelMap:
    """Label -> class id, and how many classes a model needs (ids ``0 .. count - 1``)."""

    label2id: dict[str, int]
    kind: str

    @property
    def count(self) -> int:
        return max(self.label2id.values()) + 1 if self.label2id else 0

    def as_json(self) -> dict[str, dict[str, Any]]:
        """``{"label2id": {label: id}, "id2label": {id: label}}`` (JSON keys are strings)."""
        by_id = sorted(self.label2id.items(), key=lambda kv: kv[1])
        return {"label2id": dict(self.label2id), "id2label": {str(i): label for label, i in by_id}}


def _int_like(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, np.integer)):
        return True
    return isinstance(value, str) and value.strip().lstrip("-").isdigit()


def _plain(value: Any) -> Any:
    """A label as a plain value: ints as ints, everything else as it is."""
    return int(value) if isinstance(value, np.integer) else value


def label_values(rows: Any, column: str, source: Source) -> dict[Any, int]:
    """Each distinct label of ``rows`` and its row count; ``DataError`` for a missing label or mixed kinds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    data = rows.data.column(column)
    where = f"data.label_column={column} of {source.key}={source.given}"
    if data.null_count:
        raise DataError(f"{where}: {data.null_count} of {len(data)} rows have no label. Give every row a label, or "
                        "drop the rows without one.")
    if isinstance(data.type, pa.BaseExtensionType):  # datasets' Json column: the rows' labels are of several types
        data = pa.chunked_array([chunk.storage for chunk in data.chunks], data.type.storage_type)
        counts = {json.dumps(json.loads(v)): int(c) for v, c in zip(*_counts(pc, data), strict=True)}
        values = {json.loads(v): c for v, c in counts.items()}
    else:
        values = {_plain(v): int(c) for v, c in zip(*_counts(pc, data), strict=True)}
    ints = {v: c for v, c in values.items() if _int_like(v)}
    names = {v: c for v, c in values.items() if isinstance(v, str) and v not in ints}
    other = {v: c for v, c in values.items() if v not in ints and v not in names}
    if other:
        shown = ", ".join(repr(v) for v in list(other)[:3])
        raise DataError(f"{where}: labels such as {shown} are neither class ids (0, 1, ...) nor class names. Give "
                        "each row an integer id or a name.")
    if ints and names:
        raise DataError(f"{where} mixes label kinds: {sum(ints.values())} rows have integer labels (e.g. "
                        f"{next(iter(ints))!r}) and {sum(names.values())} have names (e.g. {next(iter(names))!r}). A "
                        "label is a class id or a class name, the same kind on every row: fix the rows that differ "
                        "(a header row read as data, a shifted column).")
    return values


def _counts(pc: Any, data: Any) -> tuple[list[Any], list[int]]:
    table = pc.value_counts(data)
    return table.field("values").to_pylist(), table.field("counts").to_pylist()


def label_map(values: dict[Any, int], where: str) -> LabelMap:
    """The map of every label in ``values`` (the training rows' and the validation rows' together)."""
    if values and all(_int_like(v) for v in values):
        ids = {str(int(v)): int(v) for v in values}
        if min(ids.values()) < 0:
            raise DataError(f"{where}: label {min(ids.values())} is a negative class id. Class ids count from 0.")
        return LabelMap(dict(sorted(ids.items(), key=lambda kv: kv[1])), INT)
    return LabelMap({name: i for i, name in enumerate(sorted(str(v) for v in values))}, NAME)


def row_ids(rows: Any, column: str, labels: LabelMap) -> np.ndarray:
    """Each row's class id, from the Arrow column (no Python object per row)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    data = rows.data.column(column)
    if labels.kind == INT:
        return pc.cast(data, pa.int64()).to_numpy()
    names = pa.array(list(labels.label2id), pa.string())
    return pc.index_in(pc.cast(data, pa.string()), value_set=names).to_numpy().astype(np.int64)
