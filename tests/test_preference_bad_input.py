"""Preference data and objectives that cannot train are refused before anything is written: one paragraph naming
the fix (``precheck``, what ``python -m runner`` runs before Hydra). Identical pairs and pairs longer than
``data.seq_len`` are not refused: they are left out or cut, and counted (``tests/test_preference_data.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.config.composing.precheck import precheck
from tests.cli import run_cli
from tests.test_data_bad_input import refused_in_one_paragraph

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "examples" / "data" / "preference.jsonl"
INSTRUCT = ROOT / "examples" / "data" / "instruct.jsonl"
PAIRS = [{"prompt": f"question {i}?", "chosen": f"right {i}", "rejected": f"wrong {i}"} for i in range(40)]
DPO = ["model=gpt_tiny", "data=preference", "objective=dpo", "peft=lora", "data.seq_len=64", "data.batch_size=4",
       "compile.backend=eager"]


HH = [{"chosen": f"Human: q {i}\n\nAssistant: right {i}", "rejected": f"Human: q {i}\n\nAssistant: wrong {i}"}
      for i in range(40)]
TEMPLATE = "data.chat_template='{% for m in messages %}{{ m.content }}{% endfor %}'"


def _chat(i: int, answer: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"q {i}"}, {"role": "assistant", "content": answer}]


CHATS = [{"chosen": _chat(i, f"right {i}"), "rejected": _chat(i, f"wrong {i}")} for i in range(40)]


def _with(rows: list[dict[str, object]], changes: dict[int, dict[str, object]]) -> list[dict[str, object]]:
    """``rows`` with the row at each index of ``changes`` updated by it."""
    return [{**r, **changes.get(i, {})} for i, r in enumerate(rows)]


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _pairs(p: Path, rows: list[dict[str, object]] | None = None) -> str:
    return f"data.path={_jsonl(p / 'pairs.jsonl', PAIRS if rows is None else rows)}"


def _latin1(path: Path) -> Path:
    """The pairs as JSON lines, line 7's chosen with a Latin-1 "é" (the byte 0xe9, no UTF-8)."""
    _jsonl(path, PAIRS)
    path.write_bytes(path.read_bytes().replace(b"right 6", b"r\xe9ght 6"))
    return path


# (name, the overrides given the test's tmp_path, fragments the one paragraph must contain)
BAD: list[tuple[str, Callable[[Path], list[str]], list[str]]] = [
    ("no chosen column", lambda p: [*DPO, _pairs(p, [{"prompt": "q", "chosen_text": "a", "rejected": "b"}] * 40)],
     ["data.chosen_column=chosen", "has no column chosen", "Did you mean data.chosen_column=chosen_text?",
      "Its columns: prompt, chosen_text, rejected"]),
    ("no rejected column", lambda p: [*DPO, _pairs(p, [{"prompt": "q", "chosen": "a", "response": "b"}] * 40)],
     ["data.rejected_column=rejected", "has no column rejected", "data=instruct objective=sft"]),
    ("a misspelt prompt column", lambda p: [*DPO, _pairs(p), "data.prompt_column=question"],
     ["data.prompt_column=question", "has no column question"]),
    ("every pair identical", lambda p: [*DPO, _pairs(p, [{"prompt": "q", "chosen": "a", "rejected": "a"}] * 40)],
     ["every row's chosen is identical to its rejected", "teaches no preference"]),
    ("conversations without a chat template", lambda p: [*DPO, _pairs(p, [
        {"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
         "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}]}] * 40)],
     ["holds conversations", "no chat template", "data.chat_template="]),
    ("a role nothing maps", lambda p: [*DPO, _pairs(p, [
        {"chosen": [{"role": "user", "content": "q"}, {"role": "bot", "content": "a"}],
         "rejected": [{"role": "user", "content": "q"}, {"role": "bot", "content": "b"}]}] * 40),
        "data.chat_template='{% for m in messages %}{{ m.content }}{% endfor %}'"],
     ["line 1", "has the role 'bot'", "bot (no rule) 40", "a turn of chosen", "+data.roles.bot=assistant"]),
    ("texts and conversations mixed", lambda p: [*DPO, _pairs(p, [
        {"prompt": "q", "chosen": [{"role": "assistant", "content": "a"}], "rejected": "b"}] * 40)],
     ["mixes texts and conversations", "Convert the columns to one form"]),
    ("no shared prompt", lambda p: [*DPO, _pairs(p, [{"chosen": "a", "rejected": "b"}] * 40)],
     ["40 of 40 rows cannot be read as preference pairs (lines 1, 2, 3, 4, 5, ...; at line 1: ValueError: "
      "chosen and rejected share no start", "Fix or remove those rows"]),
    ("an empty chosen or rejected", lambda p: [*DPO, _pairs(p, _with(PAIRS, {3: {"chosen": "  "}, 7: {"rejected": ""},
                                                                             9: {"rejected": None}}))],
     ["3 of 40 rows have an empty completion (chosen at line 4; rejected at lines 8, 10: missing, only whitespace",
      "Fill them in or remove those rows"]),
    ("a missing chosen", lambda p: [*DPO, _pairs(p, [*PAIRS[:39], {"prompt": "q", "rejected": "b"}])],
     ["1 of 40 rows have an empty completion (chosen at line 40: missing"]),
    ("an empty assistant turn", lambda p: [*DPO, _pairs(p, _with(CHATS, {5: {"rejected": _chat(5, " ")}})), TEMPLATE],
     ["1 of 40 rows have an empty completion (rejected at line 6: ", "a turn of no text"]),
    ("a rejected that is the prompt alone", lambda p: [*DPO, _pairs(p, _with(HH, {2: {"rejected": "Human: q 2\n\n"
                                                                                                "Assistant: "}}))],
     ["1 of 40 rows have an empty completion (rejected at line 3: "]),
    ("prompts on some rows only", lambda p: [*DPO, _pairs(p, [*PAIRS[:20], *HH[20:]])],
     ["mixes rows with a prompt and rows without one: line 1 has a prompt, 20 of 40 rows have none (lines 21, 22, "
      "23, 24, 25, ...)", "move each prompt into the start of its row's chosen and rejected"]),
    ("conversations with a prompt on some rows only", lambda p: [*DPO, _pairs(p, [
        *CHATS[:30], *({"prompt": c["chosen"][:1], "chosen": c["chosen"][1:], "rejected": c["rejected"][1:]}
                       for c in CHATS[30:])]), TEMPLATE],
     ["mixes rows with a prompt and rows without one: line 31 has a prompt, 30 of 40 rows have none (lines 1, 2, "]),
    ("a prompt column of nothing", lambda p: [*DPO, _pairs(p, [{**r, "prompt": None} for r in HH])],
     ["its column prompt holds no prompt on any of its 40 rows", "Drop the column"]),
    ("every prompt fills seq_len", lambda p: [*DPO, _pairs(p, [{**r, "prompt": "x" * 80} for r in PAIRS])],
     ["no pair fits data.seq_len=64", "Raise data.seq_len"]),
    ("no data.path", lambda p: DPO, ["data=preference needs data.path", "data.path=examples/data/preference.jsonl"]),
    ("a Latin-1 byte", lambda p: [*DPO, f"data.path={_latin1(p / 'pairs.jsonl')}"],
     ["pairs.jsonl, line 7: the byte 0xe9 (at offset ", "is not UTF-8", "iconv -f latin1 -t utf-8",
      "pairs.utf8.jsonl"]),
    ("val_path is data.path", lambda p: [*DPO, _pairs(p), f"data.val_path={p / 'pairs.jsonl'}"],
     ["is data.path itself: validation would be the training data", "drop data.val_path"]),
    ("fewer pairs than a batch", lambda p: [*DPO, _pairs(p, PAIRS[:5]), "data.val_fraction=0.5"],
     ["leaves 3 training pairs at data.seq_len=64, fewer than data.batch_size=4", "Give more pairs"]),
    ("preference data with objective=sft", lambda p: [*DPO, _pairs(p), "objective=sft"],
     ["objective=sft with data=preference", "objective=dpo (or simpo, orpo)"]),
    ("objective=dpo with instruction data", lambda p: ["+recipe=instruct_lora", f"data.path={INSTRUCT}",
                                                       "objective=dpo"],
     ["objective=dpo trains on preference pairs", "runner.data.instruct.InstructDataModule", "data=preference",
      "objective=sft"]),
    ("objective=simpo with text", lambda p: ["+recipe=smoke", "objective=simpo"],
     ["objective=simpo trains on preference pairs", "data=preference data.path=TABLE"]),
    ("the adapter's base without an adapter", lambda p: [*DPO, _pairs(p), "peft=none", "objective.reference=base"],
     ["objective.reference=base", "peft=none", "objective.reference=copy", "objective.reference=precompute"]),
    ("the adapter's base past a loaded adapter", lambda p: [*DPO, _pairs(p), "objective.reference=base",
                                                           f"peft.path={p}"],
     ["objective.reference=base with peft.path", "--merge", "objective.reference=copy"]),
    ("a reference for SimPO", lambda p: [*DPO, _pairs(p), "objective=simpo", "objective.reference=copy"],
     ["objective.reference=copy with objective=simpo", "compares no reference"]),
    ("beta of 0", lambda p: [*DPO, _pairs(p), "objective.beta=0"], ["objective.beta=0.0", "above 0"]),
    ("label smoothing of a half", lambda p: [*DPO, _pairs(p), "objective.label_smoothing=0.5"],
     ["objective.label_smoothing=0.5", "[0, 0.5)"]),
    ("a frozen copy under FSDP", lambda p: [*DPO, _pairs(p), "peft=none", "trainer.distributed=fsdp",
                                            "trainer.devices=2"],
     ["objective.reference=copy with trainer.distributed=fsdp", "objective.reference=precompute"]),
]


@pytest.mark.parametrize(("name", "overrides", "fragments"), BAD, ids=[name for name, _, _ in BAD])
def test_bad_preference_input_is_one_paragraph_naming_the_fix(name: str, overrides: Callable[[Path], list[str]],
                                                              fragments: list[str], tmp_path: Path) -> None:
    refused_in_one_paragraph(overrides(tmp_path), fragments)


@pytest.mark.parametrize("overrides", [
    [*DPO], [*DPO, "data.packing=true"], [*DPO, "objective=simpo"], [*DPO, "objective=orpo", "peft=none"],
    [*DPO, "peft=none"], [*DPO, "peft=none", "objective.reference=precompute"], ["+recipe=llama_dpo"],
    ["+recipe=llama_dpo", "loss.chunked=true"]],
    ids=["dpo-lora", "packed", "simpo", "orpo-full", "dpo-copy", "dpo-precompute", "recipe", "recipe-chunked"])
def test_what_can_train_passes_the_same_checks(overrides: list[str], tmp_path: Path) -> None:
    precheck([*overrides, _pairs(tmp_path)] if "data=preference" in overrides else overrides)


def test_a_byte_not_utf8_exits_2_with_one_paragraph(tmp_path: Path) -> None:
    """Through the entry point: exit code 2 and the one paragraph, not pyarrow's ``UnicodeDecodeError``."""
    work = tmp_path / "work"
    work.mkdir()
    proc = run_cli(*DPO, f"data.path={_latin1(tmp_path / 'pairs.jsonl')}", cwd=work)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "line 7: the byte 0xe9" in lines[0], proc.stderr
    assert proc.stdout == "" and list(work.iterdir()) == []
