"""Preference data and objectives that cannot train are refused before anything is written: one paragraph naming
the fix (``precheck``, what ``python -m runner`` runs before Hydra). Identical pairs and pairs longer than
``data.seq_len`` are not refused: they are left out or cut, and counted (``tests/test_preference_data.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.config.composing.precheck import precheck
from tests.test_data_bad_input import refused_in_one_paragraph

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "examples" / "data" / "preference.jsonl"
INSTRUCT = ROOT / "examples" / "data" / "instruct.jsonl"
PAIRS = [{"prompt": f"question {i}?", "chosen": f"right {i}", "rejected": f"wrong {i}"} for i in range(40)]
DPO = ["model=gpt_tiny", "data=preference", "objective=dpo", "peft=lora", "data.seq_len=64", "data.batch_size=4",
       "compile.backend=eager"]


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _pairs(p: Path, rows: list[dict[str, object]] | None = None) -> str:
    return f"data.path={_jsonl(p / 'pairs.jsonl', PAIRS if rows is None else rows)}"


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
     ["40 of 40 rows cannot be read as preference pairs", "share no start", "Fix or remove those rows"]),
    ("every prompt fills seq_len", lambda p: [*DPO, _pairs(p, [{**r, "prompt": "x" * 80} for r in PAIRS])],
     ["no pair fits data.seq_len=64", "Raise data.seq_len"]),
    ("no data.path", lambda p: DPO, ["data=preference needs data.path", "data.path=examples/data/preference.jsonl"]),
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
