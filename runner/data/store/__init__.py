"""Prepared data on disk: flat token arrays read through memory maps, named by content, prepared once."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from runner.data.store.arrays import VERSION
from runner.data.store.content import digests, files_digest, read_record, write_record


def root() -> Path:
    """Where stores and digests live: ``runner/`` in ``datasets``' cache (``HF_DATASETS_CACHE``, by default
    ``~/.cache/huggingface/datasets``)."""
    import datasets

    directory = Path(datasets.config.HF_DATASETS_CACHE) / "runner"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def digest_files(files: Iterable[Path], names: bool = False) -> str:
    """The digest of ``files``' contents in order (``runner.data.store.content``), read once per state of each."""
    return files_digest(files, root() / "digests", names=names)


def file_digests(files: Iterable[Path]) -> list[str]:
    """Each file's digest (``runner.data.store.content``), read once per state of each."""
    return digests(files, root() / "digests")


def store_key(kind: str, *parts: Any) -> str:
    """A store's name from everything its content depends on (JSON-able ``parts``) and the store layout's version."""
    text = json.dumps([kind, VERSION, *parts], sort_keys=True, default=str)
    return f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def store_dir(key: str) -> Path:
    """The directory of the store named ``key``."""
    return root() / "store" / key


def remembered(key: str, compute: Callable[[], Any]) -> Any:
    """A figure computed once from stored data (JSON-able), kept under ``key`` beside the stores and read after."""
    path = root() / "figures" / f"{key}.json"
    record = read_record(path)
    if record is None or "value" not in record:
        record = {"value": compute()}
        write_record(path, record)  # a read-only cache: computed again next time
    return record["value"]
