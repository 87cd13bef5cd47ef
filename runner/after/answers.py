"""Evaluation by answers: each held-out instruction's prompt, exactly as validation read it (the run's template, its
ids), answered greedily by the decoder and scored against the answer the data gives: exact match and contains after
normalising, and a user's regex. The prompts come from the validation split, so they never trained."""

from __future__ import annotations

import logging
import re
import string
from dataclasses import dataclass
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import Callback
from torch import nn

from runner.after.family import Tokens, tokens_of
from runner.config.schema import RunConfig
from runner.models.decode import Decoder, Sampling

log = logging.getLogger(__name__)

# What the scores compare: SQuAD's normalisation (lower case, no punctuation, no articles, single spaces)
NORMALISATION = "lower case, punctuation and the articles a/an/the removed, whitespace collapsed (SQuAD's)"
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_BATCH = 16  # prompts written at once: one batch bucket of the decoder


def normalise(text: str) -> str:
    """``text`` as the scores compare it (:data:`NORMALISATION`)."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


@dataclass(frozen=True)
class Question:
    """One held-out example: its prompt ids (template included), its reference answer, and whether the example was
    cut at ``data.seq_len`` (its reference is then cut too)."""

    prompt: list[int]
    reference: str
    cut: bool


def questions(examples: Any, tokens: Tokens, eos_id: int | None, limit: int | None) -> tuple[list[Question], int]:
    """The first ``limit`` examples of a validation split (``runner.data.sequences.packed.Examples`` with an answer
    mask) as questions, and how many had no answer to score (a prompt alone fills data.seq_len)."""
    out: list[Question] = []
    skipped = 0
    for i in range(len(examples)):
        if limit is not None and len(out) == limit:
            break
        a, b = int(examples.spans.starts[i]), int(examples.spans.ends[i])
        ids = np.asarray(examples.tokens[a:b], dtype=np.int64)
        answer = np.flatnonzero(np.asarray(examples.mask[a:b]) > 0)
        if answer.size == 0 or answer[0] == 0:
            skipped += 1
            continue
        first = int(answer[0])
        # The first answer only: a chat's later turns would need the model's own earlier answers in the prompt.
        end = first + int(np.argmax(np.diff(np.r_[answer, -1]) != 1)) + 1
        reference = [int(t) for t in ids[first:end] if eos_id is None or int(t) != eos_id]
        cut = end == len(ids) and (eos_id is None or int(ids[end - 1]) != eos_id)
        out.append(Question([int(t) for t in ids[:first]], tokens.decode(reference), cut))
    return out, skipped


def score(answer: str, reference: str, regex: re.Pattern[str] | None) -> dict[str, bool]:
    """Whether ``answer`` matches ``reference``: exactly and by containing it (both normalised), and, with ``regex``,
    whether its first match in the answer (group 1 when the pattern has one) equals the reference, normalised."""
    got, want = normalise(answer), normalise(reference)
    scores = {"exact": got == want, "contains": bool(want) and want in got}
    if regex is not None:
        found = regex.search(answer)
        picked = None if found is None else found.group(1 if regex.groups else 0)
        scores["regex"] = picked is not None and normalise(picked) == want
    return scores


def answer_questions(model: nn.Module | Decoder, tokens: Tokens, asked: list[Question], sampling: Sampling,
                     regex: re.Pattern[str] | None, backend: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each question answered by ``model`` (or a decoder of it already made; one decoder for all, compiled with
    ``backend``, eager with None) and scored; the figures (``eval/answers/...``) and one row per question."""
    decoder = model if isinstance(model, Decoder) else Decoder(model, compile=backend is not None,
                                                               backend=backend or "inductor")
    rows: list[dict[str, Any]] = []
    compiled: list[str] = []
    seconds = new = 0.0
    for start in range(0, len(asked), _BATCH):
        part = asked[start:start + _BATCH]
        out = decoder.generate([q.prompt for q in part], sampling)
        seconds, new, compiled = seconds + out.seconds, new + sum(map(len, out.tokens)), compiled + out.compiled
        for q, ids in zip(part, out.tokens, strict=True):
            answer = tokens.decode(ids)
            rows.append({"prompt": tokens.decode(q.prompt), "reference": q.reference, "answer": answer,
                         "cut": q.cut, **score(answer, q.reference, regex)})
    n = len(rows)
    figures: dict[str, Any] = {"eval/answers/examples": n}
    for how in ("exact", "contains", "regex"):
        if n and how in rows[0]:
            hits = sum(r[how] for r in rows)
            figures[f"eval/answers/{how}"] = round(hits / n, 6)
            figures[f"eval/answers/{how}_count"] = hits
    figures.update({"eval/answers/cut": sum(r["cut"] for r in rows), "eval/answers/max_new_tokens":
                    sampling.max_new_tokens, "eval/answers/normalisation": NORMALISATION,
                    "eval/answers/regex_pattern": None if regex is None else regex.pattern,
                    "eval/answers/decode": f"compiled ({backend}): {', '.join(compiled) or 'graphs reused'}"
                    if backend is not None else "eager",
                    "eval/answers/tokens_per_s": round(new / seconds, 2) if seconds else 0.0})
    return figures, rows


class AnswersDuringTraining(Callback):
    """``eval.generate_every_n_steps``: every N steps the first ``eval.generate_examples`` held-out prompts answered
    (greedy) and their scores logged to the run's loggers; one decoder for the whole fit, so its graphs compile once."""

    def __init__(self, cfg: RunConfig) -> None:
        self.every, self.count, self.max_new = (cfg.eval.generate_every_n_steps, cfg.eval.generate_examples,
                                                cfg.eval.max_new_tokens)
        self.backend = cfg.compile.backend if cfg.compile.scope.row.compiles else None
        self.tokens = tokens_of(cfg)
        self.decoder: Decoder | None = None
        self.asked: list[Question] = []
        self.eos: int | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        step = trainer.global_step
        if step % self.every or not trainer.is_global_zero or self.tokens is None:
            return
        if self.decoder is None:  # the held-out split as validation reads it: the same prompts every time
            datamodule: Any = getattr(trainer, "datamodule")  # noqa: B009 - Lightning sets it at fit time
            dataset = datamodule.val_dataloader().dataset
            self.eos = datamodule.prompt_format.get("eos_id")
            self.asked, _skipped = questions(getattr(dataset, "examples", dataset), self.tokens, self.eos, self.count)
            model = getattr(pl_module, "model", pl_module)
            self.decoder = Decoder(model, compile=self.backend is not None, backend=self.backend or "inductor")
        sampling = Sampling(max_new_tokens=self.max_new, temperature=0,
                            eos_ids=() if self.eos is None else (int(self.eos),))
        figures, _rows = answer_questions(self.decoder, self.tokens, self.asked, sampling, None, self.backend)
        scores = {k: float(v) for k, v in figures.items() if k.endswith(("exact", "contains"))}
        for logger in trainer.loggers:
            logger.log_metrics(scores, step=step)
        log.info("step %d: %d held-out answers, exact %.3f, contains %.3f", step, len(self.asked),
                 scores.get("eval/answers/exact", 0.0), scores.get("eval/answers/contains", 0.0))
