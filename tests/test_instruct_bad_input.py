"""Instruction data and packing that cannot train are refused before anything is written: one paragraph naming
the fix (``precheck``, what ``python -m runner`` runs before Hydra), and through the entry point exit code 2 with
no run directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.config.composing.precheck import precheck
from tests.cli import run_cli
from tests.hf_models import save_tokenizer
from tests.test_data_bad_input import refused_in_one_paragraph

QA = [{"prompt": f"question number {i}?", "response": f"answer {i}"} for i in range(40)]
CHAT = [{"messages": [{"role": "user", "content": f"q {i}"}, {"role": "assistant", "content": f"a {i}"}]}
        for i in range(40)]
INSTRUCT = ["model=gpt_tiny", "data=instruct", "data.seq_len=128", "data.batch_size=4", "compile.backend=eager"]
PACKED_DOCS = ["+recipe=smoke", "data=text_documents", "data.seq_len=64", "data.packing=true"]


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _qa(p: Path, rows: list[dict[str, object]] | None = None) -> str:
    return f"data.path={_jsonl(p / 'qa.jsonl', QA if rows is None else rows)}"


def _no_eos_tokenizer(p: Path) -> Path:
    from transformers import AutoTokenizer

    save_tokenizer(p / "tok")
    tok = AutoTokenizer.from_pretrained(str(p / "tok"))
    tok.eos_token = None
    tok.save_pretrained(str(p / "tok"))
    return p / "tok"


# (name, the overrides given the test's tmp_path, fragments the one paragraph must contain)
BAD: list[tuple[str, Callable[[Path], list[str]], list[str]]] = [
    ("missing prompt column", lambda p: [*INSTRUCT, _qa(p), "data.prompt_column=promt"],
     ["data.prompt_column=promt", "has no column promt", "Did you mean data.prompt_column=prompt?",
      "Its columns: prompt, response"]),
    ("missing response column", lambda p: [*INSTRUCT, _qa(p, [{"prompt": "q", "responses": "a"}] * 40)],
     ["data.response_column=response", "Did you mean data.response_column=responses?", "Alpaca's"]),
    ("conversations without a chat template", lambda p: [
        *INSTRUCT, f"data.path={_jsonl(p / 'chat.jsonl', [{'messages': [{'role': 'user', 'content': 'q'}]}])}",
        "data.messages_column=messages"],
     ["data.messages_column=messages", "no chat template", "data.chat_template="]),
    ("every example longer than seq_len", lambda p: [*INSTRUCT, _qa(p), "data.seq_len=16"],
     ["every example is longer than data.seq_len=16 tokens", "Raise data.seq_len"]),
    ("empty answers", lambda p: [*INSTRUCT, _qa(p, [*QA, {"prompt": "q", "response": " "},
                                                    {"prompt": "q", "response": ""}])],
     ["2 of 42 rows have an empty answer in column response (lines 41, 42)", "Fill them in or remove those rows"]),
    ("a Latin-1 byte", lambda p: [*INSTRUCT, f"data.path={_latin1(p / 'qa.jsonl', 'answer 9')}"],
     ["qa.jsonl, line 10: the byte 0xe9 (at offset ", "is not UTF-8", "iconv -f latin1 -t utf-8", "qa.utf8.jsonl"]),
    ("a Latin-1 byte in a CSV", lambda p: [*INSTRUCT, f"data.path={_latin1(p / 'qa.csv', 'answer 12')}"],
     ["qa.csv, line 14: the byte 0xe9 (at offset ", "is not UTF-8", "read_csv(..., encoding='latin1')"]),
    ("a conversation that cannot be read", lambda p: [
        *INSTRUCT, f"data.path={_jsonl(p / 'chat.jsonl', [*CHAT, {'messages': [{'role': 'user', 'content': 'q'}]}])}",
        "data.messages_column=messages", "data.chat_template='{% for m in messages %}{{ m.content }}{% endfor %}'"],
     ["1 rows cannot be read as conversations (line 41: ", "fix or remove those rows"]),
    ("no data.path", lambda p: INSTRUCT,
     ["data=instruct needs data.path", "data.path=examples/data/instruct.jsonl"]),
    ("a JSON object holding Alpaca rows", lambda p: [*INSTRUCT, f"data.path={_object(p)}"],
     ["alpaca.json is one JSON object, not rows: its key 'examples' holds a list of 40 objects",
      "an array of objects", "json.dump(data['examples'], f)"]),  # not "has no column prompt"
    ("a text file", lambda p: [*INSTRUCT, f"data.path={_text(p)}"],
     ["is text, not a table", "data=text"]),
    ("a tokenizer without an EOS", lambda p: [*INSTRUCT, _qa(p), f"data.tokenizer={_no_eos_tokenizer(p)}",
                                             "model.vocab_size=320"],
     ["has no EOS token", "learns to stop"]),
    ("packing a model that cannot take the mask", lambda p: [
        *INSTRUCT, _qa(p), "data.packing=true", "model=hf_causal_lm", "model.config=gpt2",
        "model.overrides.intermediate_size=null", "model.overrides.num_attention_heads=2"],
     ["data.packing=true with model.config=gpt2 (gpt2)", "runner's GPT (model=gpt)", "llama, qwen2, qwen3",
      "drop data.packing"]),
    ("packing a model of one's own", lambda p: [*INSTRUCT, _qa(p), "data.packing=true", "model=custom",
                                                "model._target_=torch.nn.Linear", "+model.in_features=4",
                                                "+model.out_features=4"],
     ["model._target_=torch.nn.Linear, which does not say it takes packed rows", "packing_refusal"]),
    ("a classifier with packing", lambda p: [*INSTRUCT, _qa(p), "data.packing=true", "model=hf_classifier",
                                             "model.num_labels=2"],
     ["data.packing=true with a sequence classifier", "predicts one label per row", "Drop data.packing"]),
    ("packing windows", lambda p: ["+recipe=smoke", "data.packing=true"],
     ["data.batching=packed reads fixed windows", "data=text_documents data.packing=true"]),
    ("FlexAttention on the CPU", lambda p: [*PACKED_DOCS, "model=hf_causal_lm",
                                            "model.attn_implementation=flex_attention"],
     ["flex_attention on the CPU", "no backward on the CPU", "model.attn_implementation=sdpa"]),
]


def _latin1(path: Path, before: str) -> Path:
    """The questions as ``path`` (JSON lines or CSV, by its suffix) with a Latin-1 "é" (the byte 0xe9, no UTF-8)
    before the first ``before``."""
    import pandas as pd

    if path.suffix == ".csv":
        pd.DataFrame(QA).to_csv(path, index=False)
    else:
        _jsonl(path, QA)
    data = path.read_bytes()
    at = data.index(before.encode())
    path.write_bytes(data[:at] + b"caf\xe9 " + data[at:])
    return path


def _object(p: Path) -> Path:
    rows = [{"instruction": f"do {i}", "input": "", "output": f"done {i}"} for i in range(40)]
    (p / "alpaca.json").write_text(json.dumps({"examples": rows}, indent=1))
    return p / "alpaca.json"


def _text(p: Path) -> Path:
    (p / "notes.txt").write_text("some text\n" * 100)
    return p / "notes.txt"


@pytest.mark.parametrize(("name", "overrides", "fragments"), BAD, ids=[name for name, _, _ in BAD])
def test_bad_instruction_data_is_one_paragraph_naming_the_fix(name: str, overrides: Callable[[Path], list[str]],
                                                              fragments: list[str], tmp_path: Path) -> None:
    refused_in_one_paragraph(overrides(tmp_path), fragments)


@pytest.mark.parametrize("overrides", [
    [*INSTRUCT, "data.packing=true"], [*INSTRUCT, "model=hf_causal_lm", "data.packing=true"],
    [*INSTRUCT, "data.train_on=all"], PACKED_DOCS, [*PACKED_DOCS, "model=hf_causal_lm"]],
    ids=["gpt", "llama", "train-on-all", "documents", "documents-llama"])
def test_what_can_train_passes_the_same_checks(overrides: list[str], tmp_path: Path) -> None:
    precheck([*overrides, _qa(tmp_path)] if "data=instruct" in overrides else overrides)


def test_bad_instruction_data_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc = run_cli(*INSTRUCT, _qa(tmp_path), "data.prompt_column=question", cwd=work)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "has no column question" in lines[0], proc.stderr
    assert proc.stdout == "" and list(work.iterdir()) == []
