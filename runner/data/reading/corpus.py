"""Reading a text corpus from disk: documents as bytes, in a deterministic order."""

from __future__ import annotations

import codecs
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path

STDLIB_SUFFIXES = (".py", ".txt", ".md", ".rst")
SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "node_modules"}
SNIFF_BYTES = 8192


def stdlib_dir() -> Path:
    """The running interpreter's standard-library source: present on every machine."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_text(data: bytes) -> bool:
    """UTF-8 without NUL bytes."""
    if b"\x00" in data:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return True


def sniff(path: Path) -> bool:
    """Whether the file at ``path`` looks like text from its first ``SNIFF_BYTES`` (empty: no)."""
    try:
        with path.open("rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:  # unreadable (permissions, a dangling link): not part of the corpus
        return False
    return bool(head) and is_text(head)


def text_files(root: Path) -> Iterator[Path]:
    """Text files under ``root`` (or ``root`` itself) in sorted order, lazily (reading stops at max_bytes), never
    descending into hidden directories (``.git``, ``.venv``), installed packages or caches: they differ between
    machines, are large, and are not the user's text."""
    stdlib = root == stdlib_dir()
    if root.is_file():
        if sniff(root):
            yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if (name.endswith(STDLIB_SUFFIXES) if stdlib else sniff(path)):
                yield path


def walk_files(root: Path) -> list[Path]:
    """Every file under ``root`` in sorted order, hidden folders and files and caches left out (as for text)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS)
        out += [Path(dirpath) / name for name in sorted(filenames) if not name.startswith(".")]
    return out


def describe_missing_text(path: str | Path) -> str:
    """The message for a ``data.path`` that exists but holds no text."""
    return (f"data.path={path} holds no non-empty text files (every file there is empty, binary or not "
            "UTF-8; hidden directories such as .git are skipped). Point data.path at a directory or file "
            "of UTF-8 text, or drop it (data.path=null) to use the Python stdlib source.")


def read_documents(path: str | Path | None, max_bytes: int | None) -> list[bytes]:
    """Every text file under ``path`` (or the file itself) as one document, sorted by path so the corpus is the same on
    every run; stops once ``max_bytes`` have been read."""
    root = stdlib_dir() if path is None else Path(path).expanduser()
    if not root.exists():
        raise FileNotFoundError(
            f"data.path={path!s} does not exist. Point data.path at a directory of text files "
            "or a single file, or drop it to use the Python stdlib source."
        )
    docs: list[bytes] = []
    total = 0
    for f in text_files(root):
        data = f.read_bytes()
        if not data or (path is not None and not is_text(data)):  # text at its head, binary further on
            continue
        docs.append(data)
        total += len(data)
        if max_bytes is not None and total >= max_bytes:
            break
    if not docs:
        raise FileNotFoundError(describe_missing_text(root))
    return docs
