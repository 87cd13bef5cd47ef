"""Preference rows as token ids (an encoder of a store's chunks), then the fit of each pair to ``data.seq_len``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.data.instruct.encode import eos_id
from runner.data.instruct.formats import Render
from runner.data.preference.formats import IDENTICAL, EmptyCompletion, PairFormat, blank
from runner.data.sequences.windows import Spans
from runner.data.store.arrays import Ragged, Store
from runner.data.store.parallel import Chunk
from runner.data.tokens.tokenizers import Tokenizer

PROMPT, CHOSEN, REJECTED, PROBLEM = "prompt_ids", "chosen_ids", "rejected_ids", "problem"
SIDES = (CHOSEN, REJECTED)
# A row's problem code: none; its chosen and rejected completions are the same (left out); it cannot be read as a pair
# (refused, with the reason the encoder noted); its chosen, or its rejected, completion is empty (refused)
USABLE, SAME, UNREADABLE, EMPTY_CHOSEN, EMPTY_REJECTED = 0, 1, 2, 3, 4
VERSION = 3  # The encoder's: a new one changes every preference store's name (3: empty completions refused)


def encode_rows(fmt: PairFormat, tokenizer: Tokenizer, render: Render | None, rows: dict[str, list[Any]]) -> Chunk:
    """A chunk of rows (column -> values) as the prompt's and each completion's ids (a row with a problem: none), its
    problem codes, and why each unreadable row cannot be read."""
    eos = eos_id(tokenizer)
    assert eos is not None, "a tokenizer with an EOS (checked before the run)"
    n = len(next(iter(rows.values()))) if rows else 0
    texts: list[tuple[str, str, str] | None] = []
    problems = np.zeros(n, dtype=np.int8)
    notes: list[tuple[int, str]] = []
    for i in range(n):
        row = {k: v[i] for k, v in rows.items()}
        pair = None
        if row[fmt.chosen_column] == row[fmt.rejected_column] and not blank(row[fmt.chosen_column]):
            problems[i] = SAME
        else:
            try:
                pair = fmt.texts(row, render)
            except EmptyCompletion as e:
                problems[i] = EMPTY_CHOSEN if e.chosen else EMPTY_REJECTED
            except Exception as e:  # a malformed conversation, or a template that cannot render it
                problems[i] = UNREADABLE
                notes.append((i, f"{type(e).__name__}: {e}"))
        if pair is not None and pair.chosen == pair.rejected:  # the same once rendered
            pair, problems[i] = None, SAME
        texts.append(None if pair is None else (pair.prompt, pair.chosen, pair.rejected))
    kept = [t for t in texts if t is not None]
    special = not fmt.shape.conversational  # a chat template writes its own BOS
    prompts = tokenizer([t[0] for t in kept], special=special) if kept else []
    completions = [tokenizer([t[j] for t in kept], special=False) if kept else [] for j in (1, 2)]
    out: dict[str, list[np.ndarray]] = {PROMPT: [], CHOSEN: [], REJECTED: []}
    empty = np.zeros(0, np.int64)
    k = 0
    for t in texts:
        if t is None:
            for column in out:
                out[column].append(empty)
            continue
        out[PROMPT].append(np.asarray(prompts[k], np.int64))
        for column, ids in zip(SIDES, (completions[0][k], completions[1][k]), strict=True):
            ids = np.asarray(ids, np.int64)
            out[column].append(ids if eos in ids else np.append(ids, np.int64(eos)))
        k += 1
    ragged = {c: (np.concatenate(v) if v else empty, np.fromiter(map(len, v), dtype=np.int64, count=len(v)))
              for c, v in out.items()}
    return Chunk(ragged, {PROBLEM: problems}, notes)


class StoredIds:
    """A ragged column of a store as one flat sequence of ids (``ids[a:b]``, read from its memory map) and ``spans``,
    where each row's ids start and end in it."""

    def __init__(self, column: Ragged) -> None:
        self.values = column.values
        self.spans = Spans(*column.bounds())

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index: slice) -> np.ndarray:
        return np.asarray(self.values[index])


@dataclass
class FittedPairs:
    """Pairs fitted to ``seq_len``: where each sequence's prompt and completion lie in the flat ids, what fitting did.
    """

    prompt: StoredIds
    completion: tuple[StoredIds, StoredIds]
    prompts: Spans
    # Each kept pair's completion ids, as cut to fit ``seq_len + 1`` ids with the prompt
    completions: tuple[Spans, Spans]
    rows: np.ndarray  # Each kept pair's row index in its table
    cut: int  # Kept pairs of which a sequence was cut (the end of its completion lost)
    left_out: dict[str, int]  # Pairs not kept, by why
    prompt_tokens: int  # The kept pairs' prompt ids (each read by both sequences)
    completion_tokens: int  # The completions' ids in the loss, both sides, as cut
    whole: int  # Pairs whose two sequences fit whole

    def __len__(self) -> int:
        return len(self.rows)

    def positions(self) -> np.ndarray:
        """``[pairs, 2]``: the positions (ids - 1) each sequence trains."""
        p = self.prompts.lengths
        return np.stack([p + c.lengths - 1 for c in self.completions], axis=1)

    def sequence(self, i: int, side: int) -> tuple[np.ndarray, int]:
        """Pair ``i``'s sequence ``side`` (0 chosen, 1 rejected) as ids (int64), and where its completion starts."""
        a, b = int(self.prompts.starts[i]), int(self.prompts.ends[i])
        c = self.completions[side]
        prompt = np.asarray(self.prompt[a:b], dtype=np.int64)
        completion = np.asarray(self.completion[side][int(c.starts[i]):int(c.ends[i])], dtype=np.int64)
        return np.concatenate([prompt, completion]), b - a


def fit_pairs(store: Store, rows: np.ndarray, seq_len: int) -> FittedPairs:
    """The pairs at ``rows`` of ``store`` (those without a problem) fitted to ``seq_len``."""
    prompt = StoredIds(store.ragged(PROMPT))
    sides = (StoredIds(store.ragged(CHOSEN)), StoredIds(store.ragged(REJECTED)))
    rows = np.asarray(rows, dtype=np.int64)
    problems = np.asarray(store.column(PROBLEM)[:])[rows] if len(rows) else np.zeros(0, np.int8)
    left_out: dict[str, int] = {}
    identical = int((problems == SAME).sum())
    if identical:
        left_out[IDENTICAL] = identical
    rows = rows[problems == USABLE]
    prompts = prompt.spans.take(rows)
    room = np.maximum(seq_len + 1 - prompts.lengths, 0)  # completion ids that fit after the prompt
    full = [s.spans.take(rows) for s in sides]
    ends = [np.minimum(c.ends, c.starts + room) for c in full]
    # A sequence's first id is never a target: a completion right after an empty prompt loses its first id.
    targets = [e - c.starts - (prompts.lengths == 0) for c, e in zip(full, ends, strict=True)]
    fits = (targets[0] > 0) & (targets[1] > 0)
    no_room = int((~fits).sum())
    if no_room:
        left_out["data.seq_len (the prompt fills it: no completion left)"] = no_room
    cut_each = [c.lengths > e - c.starts for c, e in zip(full, ends, strict=True)]
    same = fits & (ends[0] - full[0].starts == ends[1] - full[1].starts) & (cut_each[0] | cut_each[1])
    for j in np.flatnonzero(same):
        a = sides[0][int(full[0].starts[j]):int(ends[0][j])]
        b = sides[1][int(full[1].starts[j]):int(ends[1][j])]
        if not np.array_equal(a, b):
            same[j] = False
    if same.any():
        left_out["chosen identical to rejected once cut at data.seq_len"] = int(same.sum())
    keep = fits & ~same
    completions = (Spans(full[0].starts[keep], ends[0][keep]), Spans(full[1].starts[keep], ends[1][keep]))
    kept_prompts = prompts.take(np.flatnonzero(keep))
    cut = (cut_each[0] | cut_each[1])[keep]
    return FittedPairs(prompt, sides, kept_prompts, completions, rows[keep], cut=int(cut.sum()), left_out=left_out,
                       prompt_tokens=int(kept_prompts.lengths.sum()),
                       completion_tokens=int(sum(c.lengths.sum() for c in completions)),
                       whole=int((~(cut_each[0] | cut_each[1]) & fits).sum()))
