"""What ``runner eval`` may read: the run's own data, or other files of the same format and columns, and for a
classifier the run's labels (labels by name are numbered in sorted order, so other names would score against the
wrong classes). Each check returns one paragraph with the fix, or None."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner.config.schema import RunConfig
from runner.config.schema.targets import ImageDataSchema, TextClassificationDataSchema
from runner.telemetry.data_report import read_labels

DATA_KEYS = ("path", "val_path")  # the data keys that name files
_FORMATS = {".jsonl": "JSON lines", ".json": "JSON lines", ".csv": "CSV", ".tsv": "tab-separated",
            ".parquet": "Parquet", ".arrow": "Arrow"}
_COLUMNS = ("text", "label")


def overrides_error(given: Sequence[str]) -> str | None:
    """``runner eval`` takes ``data.KEY=VALUE`` only: the model and everything else are the run's."""
    other = [o for o in given if not o.lstrip("+").startswith("data.")]
    if not other:
        return None
    return (f"runner eval takes data.KEY=VALUE overrides only (the data to evaluate on, e.g. data.path=FILE), not "
            f"{' '.join(other)}: the model, its checkpoint and every other setting are the run's. Drop "
            f"{other[0].split('=')[0]}.")


def file_format(path: Path) -> str:
    """A file's format by its suffix (JSON lines, CSV, Parquet, ...), ``text`` for any other."""
    return _FORMATS.get(path.suffix.lower(), "text")


def _first_line(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as f:
        return next((line for line in f if line.strip()), "")


def _sniffed(path: Path) -> str:
    """A labelled-text file's format by its first line: JSON lines or label<TAB>text."""
    return "JSON lines" if _first_line(path).lstrip().startswith("{") else "tab-separated"


def _first_row_keys(path: Path) -> list[str] | None:
    try:
        row = json.loads(_first_line(path))
    except ValueError:
        return None
    return list(row) if isinstance(row, dict) else None


def data_error(run: RunConfig, evaluated: RunConfig, run_dir: Path) -> str | None:
    """Why the data ``evaluated`` names cannot be scored by the run's model, or None (module docstring)."""
    for key in DATA_KEYS:
        new, old = getattr(evaluated.data, key, None), getattr(run.data, key, None)
        if new is None or new == old:
            continue
        path, before = Path(new).expanduser(), Path(old).expanduser() if old else None
        if (problem := _format_error(key, path, before, run)) is not None:
            return problem
        if isinstance(run.data, TextClassificationDataSchema) and path.is_file():
            problem = _columns_error(key, path, run) or _labels_error(key, path, run, run_dir)
        elif isinstance(run.data, ImageDataSchema) and path.is_dir():
            problem = _classes_error(key, path, run, before)
        if problem is not None:
            return problem
    return None


def _format_error(key: str, path: Path, before: Path | None, run: RunConfig) -> str | None:
    if before is None or not before.is_file() or not path.is_file():
        return None
    labelled = isinstance(run.data, TextClassificationDataSchema)
    new, old = ((_sniffed(p) for p in (path, before)) if labelled else (file_format(p) for p in (path, before)))
    if new == old:
        return None
    return (f"data.{key}={path} is {new}, but the run trained on {old} (data.path={before}): runner eval reads "
            f"files the way the run read its own. Give a {old} file (convert {path.name}), or evaluate on the run's "
            "data (no data override).")


def _columns_error(key: str, path: Path, run: RunConfig) -> str | None:
    keys = _first_row_keys(path)
    wanted = [getattr(run.data, f"{c}_column", c) for c in _COLUMNS]
    if keys is None or all(c in keys for c in wanted):
        return None
    missing = [c for c in wanted if c not in keys]
    return (f"data.{key}={path} has the columns {', '.join(keys)}, not {', '.join(missing)}: the run read its text "
            f"and labels from the columns {' and '.join(wanted)}. Give a file with them (rename the columns).")


def _file_labels(path: str | None, data: Any) -> list[str]:
    """The distinct labels of the labelled rows ``path`` names (None: the stdlib task), by name."""
    from runner.data.classification.labelled import read_labelled

    part = read_labelled(path, "data.path", data.text_column, data.label_column, data.max_examples, data.min_len)
    return sorted(str(label) for label in part.values)


def _labels_error(key: str, path: Path, run: RunConfig, run_dir: Path) -> str | None:
    data: Any = run.data
    try:
        labels = _file_labels(str(path), data)
    except (ValueError, UnicodeDecodeError):
        return None  # a file the data cannot read: its own check names the row
    ids = all(label.strip().lstrip("-").isdigit() for label in labels)
    if ids and all(0 <= int(label) < data.num_classes for label in labels):
        return None  # labels that are class ids score against the same classes whatever the file holds
    saved = read_labels(run_dir)  # the labels the run trained on: labels.json's where the data wrote one
    trained = sorted(str(k) for k in (saved.get("label2id") or {})) if saved else _file_labels(data.path, data)
    if labels == trained:
        return None
    other = [label for label in labels if label not in trained]
    why = (f"{len(other)} label(s) the run never saw ({', '.join(other[:5])})" if other else
           f"only {len(labels)} of the run's {len(trained)} labels, and labels by name are numbered over the names "
           "a file holds, so they would score against the wrong classes")
    return (f"data.{key}={path} has {why}. The run's labels: {', '.join(trained[:10])}. Give a file labelled with "
            "exactly these names, or with their class ids (0 to data.num_classes-1).")


def _classes_error(key: str, path: Path, run: RunConfig, before: Path | None) -> str | None:
    from runner.data.images import image_folder, split_folders

    def classes(root: Path) -> list[str]:
        split = split_folders(root)
        return image_folder(split[1] if split else root)[1]

    new = classes(path)
    old = classes(before) if before is not None and before.is_dir() else [str(c) for c in range(run.data.num_classes)]
    if new == old:
        return None
    return (f"data.{key}={path} holds the classes {', '.join(new[:8])}, but the run trained on {', '.join(old[:8])}: "
            "folder names are numbered in sorted order, so other folders would score against the wrong classes. "
            "Give a folder with exactly the run's class folders.")
