"""A table's rows through an encoder, chunk by chunk, on every core, into a store."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from runner.data.store.arrays import StoreWriter
from runner.data.store.progress import Progress

CHUNK_ROWS = 4096
# Rows from which a table is encoded in worker processes (below, starting them costs more than it saves)
PARALLEL_ROWS = 50_000


@dataclass
class Chunk:
    """What an encoder made of a chunk of rows: the store's columns, and notes about rows (row in the chunk, what is
    wrong with it) for the data's checks."""

    ragged: dict[str, tuple[np.ndarray, np.ndarray]]
    rows: dict[str, np.ndarray] = field(default_factory=dict)
    notes: list[tuple[int, str]] = field(default_factory=list)


class ChunkEncoder(Protocol):
    """Rows (a ``pyarrow.RecordBatch``) -> ``Chunk``; picklable (it crosses to worker processes)."""

    def __call__(self, batch: Any) -> Chunk: ...


def workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def table_batches(rows: Any, columns: list[str], limit: int | None = None,
                  select: np.ndarray | None = None) -> Iterator[Any]:
    """Rows of a ``datasets.Dataset`` as record batches of ``columns``, at most ``CHUNK_ROWS`` rows each: the first
    ``limit`` (None: all), or those at ``select`` (ascending indices)."""
    import pyarrow as pa

    files = [f["filename"] for f in rows.cache_files]
    wanted = np.arange(min(limit, len(rows)) if limit is not None else len(rows)) if select is None \
        else np.asarray(select, dtype=np.int64)
    if files and rows._indices is None and _file_rows(rows, files) == len(rows):
        sources: Iterator[Any] = (b for f in files for b in pa.ipc.open_stream(pa.OSFile(f, "rb")))
    else:  # tables of a few rows each (pyarrow.Table: what an encoder reads of a batch, a table has too)
        table = rows.with_format("arrow")
        sources = (table[a:a + CHUNK_ROWS] for a in range(0, len(rows), CHUNK_ROWS))
    first = 0
    for batch in sources:
        if not len(wanted) or first > wanted[-1]:
            return
        lo, hi = np.searchsorted(wanted, [first, first + batch.num_rows])
        if hi > lo:
            picked = batch.select(columns)
            if hi - lo != batch.num_rows:
                picked = picked.take(pa.array(wanted[lo:hi] - first))
            for a in range(0, picked.num_rows, CHUNK_ROWS):
                yield picked.slice(a, CHUNK_ROWS)
        first += batch.num_rows


def store_batches(store: Any, column: str, rows: tuple[str, ...] = ()) -> Iterator[Any]:
    """A store's ragged ``column`` (bytes: a text's pieces) and its row columns ``rows`` as record batches of at most
    ``CHUNK_ROWS`` rows (``column`` as binary values), read with file reads (nothing mapped)."""
    import pyarrow as pa

    ragged = store.ragged(column)
    starts, ends = ragged.bounds()
    for a in range(0, store.rows, CHUNK_ROWS):
        b = min(a + CHUNK_ROWS, store.rows)
        values = ragged.values.read(int(starts[a]), int(ends[b - 1])).astype(np.uint8, copy=False)
        offsets = (np.append(starts[a:b], ends[b - 1]) - starts[a]).astype(np.int64)
        arrays = {column: pa.LargeBinaryArray.from_buffers(pa.large_binary(), b - a, [None, pa.py_buffer(offsets),
                                                                                    pa.py_buffer(values)])}
        arrays.update({name: pa.array(store.column(name).read(a, b)) for name in rows})
        yield pa.record_batch(list(arrays.values()), names=list(arrays))


def _file_rows(rows: Any, files: list[str]) -> int:
    """The rows in a dataset's Arrow files (more than ``len(rows)`` when it is a slice of them): its split's count where
    ``datasets`` recorded one, else counted with file reads (a memory map would keep the pages it touched, and the
    kernel maps tens of kilobytes around each)."""
    import pyarrow as pa

    splits = rows.info.splits or {}
    if rows.split is not None and str(rows.split) in splits and splits[str(rows.split)].num_examples:
        return int(splits[str(rows.split)].num_examples)
    try:
        return sum(b.num_rows for f in files for b in pa.ipc.open_stream(pa.OSFile(f, "rb")))
    except (OSError, pa.ArrowInvalid):
        return -1


def encode_into(writer: StoreWriter, batches: Iterator[Any], encoder: ChunkEncoder, progress: Progress,
                processes: int) -> list[tuple[int, str]]:
    """Every batch through ``encoder`` (in ``processes`` worker processes when more than one), appended to ``writer`` in
    order; the notes of every row, by row index."""
    notes: list[tuple[int, str]] = []

    def keep(chunk: Chunk) -> None:
        notes.extend((writer.rows + i, note) for i, note in chunk.notes)
        writer.append(chunk.ragged, chunk.rows)
        progress.advance(len(next(iter(chunk.ragged.values()))[1]))

    if processes <= 1:
        for batch in batches:
            keep(encoder(batch))
        return notes
    import multiprocessing

    # Forked, as datasets' map(num_proc) and a DataLoader's workers are on Linux: no import again, and no script
    # run again in a worker (a user's script without a __main__ guard). What the writer holds is written first, so
    # that nothing buffered is copied into the workers.
    writer.flush()
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context(method),
                             initializer=_worker_start) as pool:
        pending: deque[Future[Chunk]] = deque()
        for batch in batches:
            pending.append(pool.submit(encoder, batch))
            if len(pending) >= 2 * processes:
                keep(pending.popleft().result())
        while pending:
            keep(pending.popleft().result())
    return notes


@dataclass
class Encoded:
    """What ``encode_table`` did: the notes of every row (by row index), its seconds and processes."""

    notes: list[tuple[int, str]]
    seconds: float
    processes: int


def encode_table(writer: StoreWriter, batches: Iterator[Any], encoder: ChunkEncoder, total: int, what: str,
                 progress_file: Any) -> Encoded:
    """``total`` rows through ``encoder`` into ``writer``, in worker processes from ``PARALLEL_ROWS`` rows, saying how
    far it got (``what``) when it takes a while; the writer's files closed if it fails, flushed when it is done."""
    counter = Progress(what, total, file=progress_file)
    processes = workers() if total >= PARALLEL_ROWS else 1
    try:
        notes = encode_into(writer, batches, encoder, counter, processes)
    except BaseException:
        writer.abandon()
        raise
    seconds = counter.finish()
    writer.flush()
    return Encoded(notes, seconds, processes)


def _worker_start() -> None:
    """One core per worker: the tokenizers library's own threads would compete with the other workers."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
