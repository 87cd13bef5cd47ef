"""Instruction rows as token ids with their answers marked: the encoder each chunk of a table goes through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from runner.data.instruct.chat import Render, template_render
from runner.data.instruct.formats import Format, Kind
from runner.data.store.parallel import Chunk
from runner.data.tokens.tokenizers import SavedTokenizer, Tokenizer, is_bytes, load_tokenizer

BYTES_EOS = 4  # The EOS of byte-level instruction data: ASCII's end-of-transmission byte, which text does not hold
IDS, ANSWERS, PROBLEM = "ids", "answers", "problem"
EMPTY_ANSWER, UNREADABLE = 1, 2
VERSION = 3  # What this encoder writes; a change makes a new cache entry (3: ShareGPT's turns read, roles mapped)


def eos_id(tokenizer: Tokenizer) -> int | None:
    """The id that ends every answer (None: the tokenizer has no EOS)."""
    return BYTES_EOS if is_bytes(tokenizer.name) else tokenizer.eos_id


# This process's tokenizer and chat template, by their settings: loaded once per worker
_LOADED: dict[tuple[str | None, str | None], tuple[Tokenizer, Render | None]] = {}


def largest_id(tokenizer: Tokenizer) -> int:
    """The largest id examples of ``tokenizer`` hold (their EOS included): what the store's id dtype must hold."""
    return 255 if is_bytes(tokenizer.name) else max(tokenizer.vocab_size - 1, eos_id(tokenizer) or 0)


def tokenizer_and_render(spec: str | None, chat_template: str | None,
                         given: Tokenizer | None = None) -> tuple[Tokenizer, Render | None]:
    """The tokenizer ``data.tokenizer`` names and the chat template rows are rendered with (``given``: one this process
    has loaded already)."""
    key = (None if is_bytes(spec) else spec, chat_template)
    if key not in _LOADED:
        tokenizer = given if given is not None else load_tokenizer(spec)
        inner = tokenizer.tokenizer if isinstance(tokenizer, SavedTokenizer) else None
        _LOADED[key] = (tokenizer, template_render(inner, chat_template))
    return _LOADED[key]


def encode_rows(fmt: Format, tokenizer: Tokenizer, render: Render | None, rows: dict[str, list[Any]]) -> Chunk:
    """A chunk of rows (column -> values) as ids, answers and problems."""
    eos = eos_id(tokenizer)
    assert eos is not None, "a tokenizer with an EOS (checked before the run)"
    n = len(next(iter(rows.values()))) if rows else 0
    pieces: list[list[tuple[str, bool]]] = []
    problems = np.zeros(n, dtype=np.int8)
    notes: list[tuple[int, str]] = []
    for i in range(n):
        row = {k: v[i] for k, v in rows.items()}
        try:
            segments, answers = fmt.segments(row, render)
            if not all(a.strip() for a in answers):
                segments, problems[i] = [], EMPTY_ANSWER
        except Exception as e:  # a malformed conversation, or a template that cannot render it
            segments, problems[i] = [], UNREADABLE
            notes.append((i, f"{type(e).__name__}: {e}"))
        pieces.append(segments)
    if is_bytes(tokenizer.name):
        ids, lengths, runs = _bytes_ids(pieces)
    else:
        ids, lengths, runs = _pieces_ids(pieces, tokenizer, special=fmt.kind is not Kind.chat, eos=eos)
    return Chunk({IDS: (ids, lengths), ANSWERS: (runs, _run_lengths(pieces))}, {PROBLEM: problems}, notes)


@dataclass(frozen=True)
class InstructEncoder:
    """Rows of one table (a ``pyarrow.RecordBatch``) -> their ids, answers and problems (``encode``: a format's rows'
    encoder); the tokenizer (``data.tokenizer``'s spec, None for bytes) and chat template loaded once per process."""

    fmt: Any
    tokenizer: str | None
    chat_template: str | None
    encode: Callable[[Any, Tokenizer, Render | None, dict[str, list[Any]]], Chunk] = encode_rows

    def __call__(self, batch: Any) -> Chunk:
        tokenizer, render = tokenizer_and_render(self.tokenizer, self.chat_template)
        return self.encode(self.fmt, tokenizer, render, batch.to_pydict())


def _run_lengths(pieces: list[list[tuple[str, bool]]]) -> np.ndarray:
    """Values each row holds in ``answers``: two per answer."""
    return np.fromiter((2 * sum(a for _, a in p) for p in pieces), dtype=np.int64, count=len(pieces))


def _bytes_ids(pieces: list[list[tuple[str, bool]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of any pieces in bytes, the EOS after each answer that does not hold it: a whole chunk at once."""
    eos = bytes([BYTES_EOS])
    texts = [t.encode("utf-8") for p in pieces for t, _ in p]
    answer = np.fromiter((a for p in pieces for _, a in p), dtype=bool, count=len(texts))
    texts = [t + eos if a and eos not in t else t for t, a in zip(texts, answer.tolist(), strict=True)]
    sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    row = np.repeat(np.arange(len(pieces)), [len(p) for p in pieces])
    lengths = np.bincount(row, weights=sizes, minlength=len(pieces)).astype(np.int64)
    ends = np.cumsum(sizes) - (np.cumsum(lengths) - lengths)[row]  # each piece's end within its row
    runs = np.stack([ends - sizes, ends], axis=1)[answer].reshape(-1)
    return np.frombuffer(b"".join(texts), dtype=np.uint8), lengths, runs.astype(np.int32)


def _pieces_ids(pieces: list[list[tuple[str, bool]]], tokenizer: Tokenizer, special: bool,
                eos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of any pieces: the first tokenized with the special tokens (``special``), the rest without."""
    assert isinstance(tokenizer, SavedTokenizer), "bytes are encoded by _bytes_ids"
    firsts = iter(tokenizer.ids([p[0][0] for p in pieces if p], special))
    rests = iter(tokenizer.ids([t for p in pieces for t, _ in p[1:]], False))
    rows: list[list[int]] = []
    runs: list[int] = []
    for p in pieces:
        row: list[int] = []
        for j, (_, answer) in enumerate(p):
            ids = next(firsts) if j == 0 else next(rests)
            if answer:
                if eos not in ids:
                    ids = [*ids, eos]
                runs += (len(row), len(row) + len(ids))
            row += ids
        rows.append(row)
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    return flat, lengths, np.asarray(runs, dtype=np.int32)

