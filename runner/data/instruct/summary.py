"""The data section of instruction data: the rows read, the examples they became, their prompt and answer tokens, what
``data.seq_len`` cut or left out (and which part), and what packing made of them."""

from __future__ import annotations

from typing import Any

from runner.data.instruct.fit import Fitted
from runner.data.instruct.formats import Format, Kind
from runner.data.summary import DataSummary
from runner.metrics import counted


def summarize(parts: list[Any], fitted: tuple[Fitted, Fitted], train: int, val: int, split: str, fmt: Format,
              packs: dict[str, Any] | None) -> tuple[DataSummary, dict[str, Any]]:
    """The common data section (``DataSummary``) and instruction data's own figures."""
    dropped = {("data.val_path: " if i else "") + k: n for i, p in enumerate(parts) for k, n in p.dropped.items()}
    left_out = sum(f.left_out for f in fitted)
    if left_out:
        dropped["data.seq_len (the prompt fills it: no answer left)"] = left_out
    used = sum(len(f.spans) for f in fitted)
    summary = DataSummary("; ".join(p.source for p in parts), sum(p.files for p in parts),
                          sum(p.rows for p in parts), sum(int(f.spans.lengths.sum()) for f in fitted), train, val,
                          split, truncated=sum(f.cut for f in fitted), used=used, dropped=dropped)
    own: dict[str, Any] = {"data/format": fmt.describe(), "data/examples": used,
                           "data/prompt_tokens": sum(f.prompt_tokens for f in fitted),
                           "data/answer_tokens": sum(f.answer_tokens for f in fitted),
                           "data/loss_tokens": sum(f.loss_tokens for f in fitted)}
    if summary.truncated:  # what cutting an example at data.seq_len loses
        own["data/cut_part"] = ("the end of the conversation: the rest of the turn it reaches, later turns, their EOS"
                                if fmt.kind is Kind.chat else "the end of the answer, and its EOS")
    if fmt.kind is Kind.chat:
        own.update(turn_figures(parts, fitted))
    if packs is not None:
        own.update(packs)
    return summary, own


def turn_figures(parts: list[Any], fitted: tuple[Fitted, Fitted]) -> dict[str, Any]:
    """A chat's turns: by role, the assistant turns trained on and those ``data.seq_len`` cut off, the others."""
    turns = [p.turns for p in parts if p.turns is not None]
    answers = sum(t.answers for t in turns)
    trained = sum(f.answer_runs for part, f in zip((parts[0], parts[-1]), fitted, strict=True)
                  if part.turns is not None)
    roles: dict[str, tuple[str | None, int]] = {}
    for t in turns:
        for written, (role, n) in t.roles.items():
            roles[written] = (role, roles.get(written, (role, 0))[1] + n)
    shown = ", ".join(f"{w}{'' if r == w else f' -> {r}'} {n}" for w, (r, n) in roles.items())
    return {"data/roles": shown, "data/turns_trained": trained, "data/turns_cut": answers - trained,
            "data/turns_prompt": sum(t.others for t in turns)}


def describe(own: dict[str, Any]) -> str:
    """Instruction data's figures in one log line."""
    line = (f"{own['data/format']}; {counted(own['data/examples'], 'example')}, "
            f"{own['data/prompt_tokens']} prompt and {own['data/answer_tokens']} answer tokens, "
            f"{own['data/loss_tokens']} in the loss")
    if "data/turns_trained" in own:
        line += (f"; turns ({own['data/roles']}): {own['data/turns_trained']} assistant turns trained on, "
                 f"{own['data/turns_cut']} cut off by data.seq_len, {own['data/turns_prompt']} other turns "
                 "in the prompt")
    if "data/packs" in own:
        line += (f"; packed into {counted(own['data/packs'], 'row')} "
                 f"({own['data/examples_per_pack']} examples a row, "
                 f"{own['data/packing_padding_pct']}% padding)")
    return line
