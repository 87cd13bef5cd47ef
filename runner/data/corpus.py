"""Reading a text corpus from disk: documents as bytes, in a deterministic order."""

from __future__ import annotations

import math
import os
import sysconfig
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

TEXT_SUFFIXES = (".py", ".txt", ".md", ".rst")
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", ".git"}


def stdlib_dir() -> Path:
    """The running interpreter's standard-library source: present on every machine."""
    return Path(sysconfig.get_paths()["stdlib"])


def read_documents(path: str | Path | None, max_bytes: int | None) -> list[bytes]:
    """Every text file under ``path`` (or the file itself) as one document, sorted by path so the
    corpus is the same on every run; stops once ``max_bytes`` have been read.

    ``None`` reads the stdlib source (``site-packages`` excluded: it differs between machines).
    Raises ``FileNotFoundError`` with the fix when the path is missing or holds no text.
    """
    root = stdlib_dir() if path is None else Path(path).expanduser()
    if not root.exists():
        raise FileNotFoundError(
            f"data.path={path!s} does not exist. Point data.path at a directory of text files "
            f"({', '.join(TEXT_SUFFIXES)}) or a single file, or drop it to use the Python stdlib source."
        )
    docs: list[bytes] = []
    total = 0
    for f in _text_files(root):
        data = f.read_bytes()
        if not data:
            continue
        docs.append(data)
        total += len(data)
        if max_bytes is not None and total >= max_bytes:
            break
    if not docs:
        raise FileNotFoundError(
            f"data.path={root} holds no non-empty text files ({', '.join(TEXT_SUFFIXES)}). "
            "Point data.path at a directory or file of text."
        )
    return docs


def _text_files(root: Path) -> Iterator[Path]:
    """Text files under ``root`` in sorted order, lazily (reading stops at max_bytes), never
    descending into installed packages or caches (they differ between machines, and are large)."""
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(TEXT_SUFFIXES):
                yield Path(dirpath) / name


def unigram_bits_per_byte(docs: list[bytes]) -> float:
    """Entropy of the byte distribution: what a model that ignores context would reach."""
    counts: Counter[int] = Counter()
    for d in docs:
        counts.update(d)
    n = sum(counts.values())
    return -sum(c / n * math.log2(c / n) for c in counts.values())
