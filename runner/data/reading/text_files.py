"""Text files into runner's store of raw bytes (``bytes``: a piece of a file, exactly its bytes; ``doc``: which file),
named by the files' contents; pieces end at a newline, or at ``split_at`` when given, so no file need fit in memory."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.data.reading.sources import Source

log = logging.getLogger(__name__)

# Text files are stored in pieces of at most about this many bytes (4 MiB): what a file costs in memory
PIECE_BYTES = 1 << 22


def _pieces(path: Path, split_at: bytes | None) -> Iterator[bytes]:
    """``path``'s bytes in pieces: at each ``split_at`` (dropped, as ``bytes.split`` drops it), else after a newline,
    each at most about ``PIECE_BYTES``."""
    carry = b""
    with path.open("rb") as f:
        while block := f.read(PIECE_BYTES):
            data = carry + block
            if split_at:
                *done, carry = data.split(split_at)
                yield from done
                if len(carry) > PIECE_BYTES:  # no separator for a long stretch: store it as it is
                    yield carry
                    carry = b""
            else:
                cut = data.rfind(b"\n") + 1 or len(data)
                yield data[:cut]
                carry = data[cut:]
    if carry or split_at:
        yield carry


def load_text_files(source: Source, split_at: bytes | None) -> Any:
    """The text files of ``source`` as a store of their pieces (``bytes``, byte-level text's ids; ``doc``, the file's
    index), written once into runner's cache and read from there by later runs."""
    import numpy as np

    from runner.data.store import digest_files, store_dir, store_key
    from runner.data.store.arrays import StoreWriter
    from runner.data.store.progress import Progress
    from runner.data.store.shared import prepared, progress_file

    directory = store_dir(store_key("text", digest_files(source.files), split_at, 2))

    def build(tmp: Path) -> None:
        writer = StoreWriter(tmp, ragged={"bytes": np.uint8}, rows={"doc": np.int32})
        counter = Progress(f"reading {source.key}={source.given}", sum(f.stat().st_size for f in source.files),
                           file=progress_file(directory), unit="bytes")
        docs: list[int] = []
        pieces: list[bytes] = []

        def flush() -> None:  # about PIECE_BYTES at a time: memory stays that small
            lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
            writer.append({"bytes": (np.frombuffer(b"".join(pieces), np.uint8), lengths)}, {"doc": np.array(docs)})
            counter.advance(int(lengths.sum()))
            docs.clear()
            pieces.clear()

        held = 0
        try:
            for i, f in enumerate(source.files):
                for piece in _pieces(f, split_at):
                    docs.append(i)
                    pieces.append(piece)
                    held += len(piece)
                    if held >= PIECE_BYTES:
                        flush()
                        held = 0
            if pieces:
                flush()
        except BaseException:
            writer.abandon()
            raise
        writer.finish({"seconds": round(counter.finish(), 2)})

    store, built = prepared(directory, build, f"{source.key}={source.given}")
    if built:
        log.info("data: stored %d text files of %s in %s (%.1f s)", len(source.files), source.given, directory,
                 store.meta["seconds"])
    else:
        log.info("data: %d text files of %s read from the cache (%s): nothing to prepare", len(source.files),
                 source.given, directory)
    return store
