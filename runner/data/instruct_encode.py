"""Instruction rows as token ids with their answers marked: a cached ``map``, then the fit to ``data.seq_len``.

Each row's pieces (:mod:`runner.data.instruct_formats`) are tokenized one by one: the first with the tokenizer's
special tokens (a BOS where it adds one; a chat template writes its own), the rest without. Every answer ends with
the EOS (the tokenizer's ``eos_token``; byte-level text: :data:`BYTES_EOS`), added where the answer's ids do not
hold it already (a chat template's end-of-turn often is the EOS). ``mask`` is 1 on the answers' ids, their EOS
included; the loss covers them (``data.train_on=answer``) or every id (``all``), as the data module chooses.

An example of ``n`` ids trains ``n - 1`` positions (inputs ``ids[:-1]``, targets ``ids[1:]``). One longer than
``data.seq_len`` positions is cut at ``seq_len + 1`` ids: the end of its answer (and the EOS) is lost; one whose
prompt alone fills ``seq_len`` has no answer left and is left out (:func:`fit`). Both are counted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runner.data.encoding import ArrowTokens, rows_stamp
from runner.data.instruct_formats import Format, Kind, Render
from runner.data.tables import cache_root, fingerprint, quiet_datasets
from runner.data.tokenizers import Tokenizer, is_bytes, tokenizer_stamp
from runner.data.windows import Spans

log = logging.getLogger(__name__)

BYTES_EOS = 4
"""The EOS of byte-level instruction data: ASCII's end-of-transmission byte, which text does not hold."""
IDS, MASK, PROBLEM = "ids", "mask", "problem"


def eos_id(tokenizer: Tokenizer) -> int | None:
    """The id that ends every answer (None: the tokenizer has no EOS)."""
    return BYTES_EOS if is_bytes(tokenizer.name) else tokenizer.eos_id


def _ids(tokenizer: Tokenizer, texts: list[str], special: bool) -> list[np.ndarray]:
    if not texts:
        return []
    if is_bytes(tokenizer.name):
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8).astype(np.int32) for t in texts]
    return tokenizer(texts, special=special)


def encode_rows(fmt: Format, tokenizer: Tokenizer, render: Render | None,
                rows: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A batch of rows (column -> values) as ``ids``, ``mask`` and ``problem`` (empty where the row is usable)."""
    eos = eos_id(tokenizer)
    assert eos is not None, "a tokenizer with an EOS (checked before the run)"
    n = len(next(iter(rows.values()))) if rows else 0
    pieces: list[list[tuple[str, bool]]] = []
    problems: list[str] = []
    for i in range(n):
        row = {k: v[i] for k, v in rows.items()}
        try:
            segments = fmt.segments(row, render)
            problem = "an empty answer" if any(a and not t.strip() for t, a in _answers(fmt, row, segments)) else ""
        except Exception as e:  # a malformed conversation, or a template that cannot render it
            segments, problem = [], f"{type(e).__name__}: {e}"
        pieces.append(segments if not problem else [])
        problems.append(problem)
    special = fmt.kind is not Kind.chat  # a chat template writes its own BOS
    firsts = _ids(tokenizer, [p[0][0] for p in pieces if p], special)
    rests = _ids(tokenizer, [t for p in pieces for t, _ in p[1:]], False)
    out_ids: list[np.ndarray] = []
    out_mask: list[np.ndarray] = []
    f = r = 0
    for p in pieces:
        ids_parts, mask_parts = [], []
        for j, (_, answer) in enumerate(p):
            ids = firsts[f] if j == 0 else rests[r]
            f, r = (f + 1, r) if j == 0 else (f, r + 1)
            if answer and eos not in ids:
                ids = np.append(ids, np.int32(eos))
            ids_parts.append(ids)
            mask_parts.append(np.full(len(ids), 1 if answer else 0, dtype=np.int8))
        out_ids.append(np.concatenate(ids_parts).astype(np.int32) if ids_parts else np.zeros(0, np.int32))
        out_mask.append(np.concatenate(mask_parts) if mask_parts else np.zeros(0, np.int8))
    return {IDS: out_ids, MASK: out_mask, PROBLEM: problems}


def _answers(fmt: Format, row: dict[str, Any], segments: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """The answers' own text: a chat's assistant contents (the rendered pieces carry template markup)."""
    if fmt.kind is Kind.chat:
        from runner.data.instruct_chat import ANSWER_ROLE, messages_of

        return [(m["content"], True) for m in messages_of(row[fmt.columns[0]], dict(fmt.roles))
                if m["role"] == ANSWER_ROLE]
    return [s for s in segments if s[1]]


def encode_instructions(rows: Any, fmt: Format, tokenizer: Tokenizer, render: Render | None,
                        chat_template: str | None, what: str) -> Any:
    """``rows`` as ids, mask and problem (:func:`encode_rows`), written once to runner's cache and read from there
    by later runs (named after the rows' files, the format, the tokenizer's files and the settings)."""
    import functools

    import datasets

    stamp = rows_stamp(rows)
    key = fingerprint(stamp, *fmt.key(), tokenizer_stamp(tokenizer), chat_template, BYTES_EOS, 1)
    name = None if stamp is None else str(cache_root() / f"instruct-{key}.arrow")
    cached = name is not None and Path(name).exists()
    features = datasets.Features({IDS: datasets.List(datasets.Value("int32")),
                                  MASK: datasets.List(datasets.Value("int8")), PROBLEM: datasets.Value("string")})
    fn = functools.partial(encode_rows, fmt, tokenizer, render)
    with quiet_datasets():
        out = rows.map(fn, batched=True, batch_size=1000, writer_batch_size=1000, features=features,
                       cache_file_name=name, keep_in_memory=name is None,
                       new_fingerprint=None if name is None else Path(name).stem, remove_columns=rows.column_names,
                       load_from_cache_file=True)
    if cached:
        log.info("data: instruction examples of %s read from the cache (%s): not tokenized again", what, name)
    return out


@dataclass
class Fitted:
    """Examples fitted to ``seq_len``: their spans in ``tokens`` (ids) and ``mask``, and what fitting did."""

    tokens: ArrowTokens
    mask: ArrowTokens
    spans: Spans
    rows: np.ndarray
    """Each kept example's row index."""
    cut: int
    left_out: int
    prompt_tokens: int
    """Ids outside the answers (prompts, templates, a chat's other turns), over the kept examples as cut."""
    answer_tokens: int
    """The answers' ids, their EOS included."""
    loss_tokens: int
    """Targets in the loss: the answers' (``data.train_on=answer``) or every position (``all``)."""
    whole: int
    """Examples that fit whole."""


def fit(encoded: Any, rows: np.ndarray, seq_len: int, answers_only: bool) -> Fitted:
    """The examples at ``rows`` cut at ``seq_len + 1`` ids; those with no target in the loss left within it are
    left out (module docstring)."""
    tokens, mask = ArrowTokens(encoded, IDS), ArrowTokens(encoded, MASK)
    len(tokens)
    len(mask)
    spans = tokens.spans.take(rows)
    ends = np.minimum(spans.ends, spans.starts + seq_len + 1)
    flat = np.concatenate([[0], np.cumsum(mask[0:len(mask)], dtype=np.int64)]) if len(mask) else np.zeros(1, np.int64)
    answer_ids = flat[ends] - flat[spans.starts]
    targets = np.maximum(ends - spans.starts - 1, 0)
    # Targets are ids 1.. of each example; the first id is never one (an answer never starts an example).
    in_loss = flat[ends] - flat[np.minimum(spans.starts + 1, ends)] if answers_only else targets
    long = spans.lengths > seq_len + 1
    keep = in_loss > 0
    kept = Spans(spans.starts[keep], ends[keep])
    answers = int(answer_ids[keep].sum())
    return Fitted(tokens, mask, kept, rows[keep], cut=int((long & keep).sum()), left_out=int((~keep).sum()),
                  prompt_tokens=int(kept.lengths.sum()) - answers, answer_tokens=answers,
                  loss_tokens=int(in_loss[keep].sum()), whole=int((~long).sum()))
