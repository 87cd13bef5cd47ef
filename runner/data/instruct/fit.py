"""Prepared instruction examples fitted to ``data.seq_len``: which are cut, which are left out, what is in the loss. An
example of ``n`` ids trains ``n - 1`` positions (inputs ``ids[:-1]``, targets ``ids[1:]``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runner.data.instruct.encode import ANSWERS, IDS
from runner.data.sequences.windows import Spans
from runner.data.store.arrays import Mapped, Store
from runner.packing.bins import PackRows


class AnswerMask:
    """Where the answers are in a store's flat ids, read as a mask: ``mask[a:b]`` is ``int8``, 1 on answer ids."""

    def __init__(self, example_starts: np.ndarray, runs: Store) -> None:
        answers = runs.ragged(ANSWERS)
        pairs = np.asarray(answers.values[:], dtype=np.int64).reshape(-1, 2)
        self.example = np.repeat(np.arange(len(answers)), np.diff(np.asarray(answers.offsets[:])) // 2)
        self.starts = example_starts[self.example] + pairs[:, 0]
        self.ends = example_starts[self.example] + pairs[:, 1]
        self.length = int(example_starts[-1]) if len(example_starts) else 0

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: slice) -> np.ndarray:
        a, b = index.start or 0, index.stop
        out = np.zeros(b - a, dtype=np.int8)
        first, last = np.searchsorted(self.ends, a, side="right"), np.searchsorted(self.starts, b, side="left")
        for s, e in zip(self.starts[first:last].tolist(), self.ends[first:last].tolist(), strict=True):
            out[max(s, a) - a:min(e, b) - a] = 1
        return out


class Encoded:
    """One setting's prepared examples: their ids (flat, memory-mapped), bounds and answers."""

    def __init__(self, store: Store) -> None:
        ids = store.ragged(IDS)
        self.tokens: Mapped = ids.values
        self.starts, self.ends = ids.bounds()
        self.answers = AnswerMask(np.append(self.starts, self.ends[-1:]), store)

    def __len__(self) -> int:
        return len(self.starts)


@dataclass
class Fitted:
    """Examples fitted to ``seq_len``: their spans in ``tokens`` (ids) and ``mask``, and what fitting did."""

    tokens: Mapped
    mask: AnswerMask
    spans: Spans
    rows: np.ndarray  # Each kept example's row index
    cut: int
    left_out: int
    # Ids outside the answers (prompts, templates, a chat's other turns), over the kept examples as cut
    prompt_tokens: int
    answer_tokens: int  # The answers' ids, their EOS included
    loss_tokens: int  # Targets in the loss: the answers' (``data.train_on=answer``) or every position (``all``)
    whole: int  # Examples that fit whole
    # Answers with a target in the loss (a conversation's: its assistant turns trained on; the others were cut off by
    # ``data.seq_len``)
    answer_runs: int = 0
    packs: PackRows | None = None  # With packing: which examples share each row


def fit(encoded: Encoded, rows: np.ndarray, seq_len: int, answers_only: bool) -> Fitted:
    """The examples at ``rows`` cut at ``seq_len + 1`` ids; those with no target in the loss left within it are left
    out."""
    rows = np.asarray(rows, dtype=np.int64)
    starts, ends = encoded.starts, np.minimum(encoded.ends, encoded.starts + seq_len + 1)
    mask = encoded.answers
    # Each answer run as it survives the cut; targets are ids 1.. of an example (its first id is never one).
    run_end = np.minimum(mask.ends, ends[mask.example])
    kept_ids = np.maximum(run_end - mask.starts, 0)
    as_targets = np.maximum(run_end - np.maximum(mask.starts, starts[mask.example] + 1), 0)
    n = len(encoded)
    answer_ids = np.bincount(mask.example, weights=kept_ids, minlength=n).astype(np.int64)[rows]
    targets = np.maximum(ends[rows] - starts[rows] - 1, 0)
    in_loss = np.bincount(mask.example, weights=as_targets, minlength=n).astype(np.int64)[rows] if answers_only \
        else targets
    runs = np.bincount(mask.example, weights=as_targets > 0, minlength=n).astype(np.int64)[rows]
    long = encoded.ends[rows] - starts[rows] > seq_len + 1
    keep = in_loss > 0
    kept = Spans(starts[rows][keep], ends[rows][keep])
    answers = int(answer_ids[keep].sum())
    return Fitted(encoded.tokens, mask, kept, rows[keep], cut=int((long & keep).sum()), left_out=int((~keep).sum()),
                  prompt_tokens=int(kept.lengths.sum()) - answers, answer_tokens=answers,
                  loss_tokens=int(in_loss[keep].sum()), whole=int((~long).sum()), answer_runs=int(runs[keep].sum()))
