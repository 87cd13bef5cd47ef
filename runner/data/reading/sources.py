"""What ``data.path`` (and ``data.val_path``) name: a file, a folder or a glob, read as one kind of data."""

from __future__ import annotations

import glob
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner import hub
from runner.data.reading.corpus import describe_missing_text, sniff, text_files, walk_files
from runner.metrics import counted

log = logging.getLogger(__name__)

# A table file's suffix -> the ``datasets`` builder that reads it
TABLE_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
SAVED = "saved"
# Files beside a folder's tables that do not make it a folder of text
_NOTES = ("README", "LICENSE", "NOTICE", "CHANGELOG")
TEXT = "text"


class DataError(ValueError):
    """Data that cannot be read as asked: the message is one paragraph, with the fix."""


def prepared_store(directory: Path, build: Any, what: str) -> tuple[Any, bool]:
    """The store ``prepared`` builds or waits for, and whether this process built it; a stalled wait: ``DataError``."""
    from runner.data.store.shared import PrepareTimeout, prepared

    try:
        return prepared(directory, build, what)
    except PrepareTimeout as e:
        raise DataError(str(e)) from e


@dataclass(frozen=True)
class Source:
    """The files one setting names and how they are read: ``kind`` is ``text``, ``json``, ``csv``, ``parquet`` or
    ``saved`` (a ``save_to_disk`` folder, the one entry of ``files``)."""

    key: str
    given: str
    kind: str
    files: tuple[Path, ...]

    @property
    def is_table(self) -> bool:
        return self.kind != TEXT

    def describe(self) -> str:
        """The files, for the data section: ``3 .jsonl files under DIR`` or the one file."""
        if len(self.files) == 1:
            return str(self.files[0])
        return f"{counted(len(self.files), self.kind + ' file')} ({self.given})"


# A saved DatasetDict's splits that are its own validation set, the first one present: a Hub data set's names too
VALIDATION_SPLITS = hub.VALIDATION_SPLITS


def own_validation(given: str | None) -> str | None:
    """The folder of the validation split of the ``DatasetDict`` that ``given`` (``data.path``) names, where it was
    saved with one (``DIR/validation``); None for anything else."""
    root = Path(given).expanduser() if given else None
    if root is None or not (root / "dataset_dict.json").is_file():
        return None
    return next((str(Path(given) / s) for s in VALIDATION_SPLITS  # type: ignore[arg-type]
                 if is_saved_dataset(root / s)), None)


def is_saved_dataset(root: Path) -> bool:
    """Whether ``root`` is a folder ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk`` wrote."""
    return root.is_dir() and ((root / "state.json").is_file() or (root / "dataset_dict.json").is_file())


def _of_files(key: str, given: str, files: list[Path]) -> Source:
    """The kind of ``files``: their one table format, else text."""
    formats = sorted({TABLE_FORMATS[f.suffix.lower()] for f in files if f.suffix.lower() in TABLE_FORMATS})
    if len(formats) > 1:
        raise DataError(f"{key}={given} holds tables of several formats ({', '.join(formats)}): a data set is read "
                        f"in one format. Point {key} at one of them with a glob ({key}='{given.rstrip('/')}/*.csv') or "
                        "a single file.")
    if formats:
        tables = [f for f in files if TABLE_FORMATS.get(f.suffix.lower()) == formats[0]]
        if len(tables) < len(files):
            log.info("data: %s=%s: reading its %d %s files; %d other files left out", key, given, len(tables),
                     formats[0], len(files) - len(tables))
        return Source(key, given, formats[0], tuple(tables))
    text = [f for f in files if sniff(f)]
    if not text:
        raise DataError(describe_missing_text(given).replace("data.path", key, 1))
    return Source(key, given, TEXT, tuple(text))


def resolve(given: str, key: str = "data.path") -> Source:
    """The source ``given`` names (a file, a folder or a glob); ``DataError`` when it names nothing readable."""
    root = Path(given).expanduser()
    if any(c in given for c in "*?["):
        matches = [Path(m) for m in sorted(glob.glob(str(root), recursive=True))]
        if len(matches) == 1 and is_saved_dataset(matches[0]):
            return Source(key, given, SAVED, (matches[0],))
        files = [m for m in matches if m.is_file()]
        if not files:
            raise DataError(f"{key}={given} matches no file. Check the pattern (it is matched from the current "
                            f"directory, {Path.cwd()}), or give a file or a folder.")
        return _of_files(key, given, files)
    if not root.exists():
        raise DataError(f"{key}={given} does not exist. Point it at a file, a folder or a glob of .txt, .jsonl, "
                        ".csv or .parquet files, or a save_to_disk folder.")
    if is_saved_dataset(root):
        return Source(key, given, SAVED, (root,))
    if root.is_file():
        return _of_files(key, given, [root])
    tables = [f for f in walk_files(root) if f.suffix.lower() in TABLE_FORMATS]
    text = list(text_files(root))
    if tables and not [f for f in text if f not in tables and not f.name.upper().startswith(_NOTES)]:
        return _of_files(key, given, tables)  # a folder of tables (a README beside them): their rows
    if tables:
        log.warning("data: %s=%s holds tables (%s) among other text files: every UTF-8 file is read as text, the "
                    "tables' bytes included. To read the tables' rows, give a glob: %s='%s/*%s'.", key, given,
                    tables[0].name, key, given.rstrip("/"), tables[0].suffix)
    if not text:
        raise DataError(describe_missing_text(given).replace("data.path", key, 1))
    return Source(key, given, TEXT, tuple(text))


def val_path_refusal(path: str | None, val_path: str | None, give: str = "other rows") -> str | None:
    """The refusal of a data.val_path that is data.path itself (None: it is not); ``give``: what to give instead."""
    if val_path is not None and path is not None and Path(val_path).expanduser().resolve() == \
            Path(path).expanduser().resolve():
        return (f"data.val_path={val_path} is data.path itself: validation would be the training data. Give {give}, "
                "or drop data.val_path to validate on a split of data.path.")
    return None


def names_something(given: str | None) -> bool:
    """Whether ``given`` is unset, a glob, or a path that exists (a missing one is the config check's to name)."""
    return given is None or any(c in given for c in "*?[") or Path(given).expanduser().exists()


def capped(files: tuple[Path, ...], max_bytes: int | None) -> tuple[tuple[Path, ...], int]:
    """The first files whose sizes reach ``max_bytes`` (the one that crosses it included), and how many are left out."""
    if max_bytes is None:
        return files, 0
    total = 0
    for i, f in enumerate(files):
        total += f.stat().st_size
        if total >= max_bytes:
            return files[:i + 1], len(files) - i - 1
    return files, 0
