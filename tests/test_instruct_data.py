"""Instruction and chat data: each shape's examples, the answers in the loss and nothing else, an EOS after every
answer, what data.seq_len cuts, the data section's counts, and packed rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from runner.data.instruct import InstructDataModule
from runner.data.instruct.encode import BYTES_EOS
from runner.data.instruct.formats import ALPACA_NO_INPUT_TEMPLATE, ALPACA_TEMPLATE, PAIR_TEMPLATE
from runner.data.sequences.padding import IGNORE_INDEX
from runner.packing import PackedInputs
from tests.hf_models import save_tokenizer

CHAT = ("{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% if m.role == 'assistant' %}{{ eos_token }}"
        "{% endif %}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
"""A chat template that ends each assistant turn with the tokenizer's EOS (as many do)."""
PLAIN_CHAT = ("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
              "{% if add_generation_prompt %}[assistant] {% endif %}")
"""One that does not: runner adds the EOS after each answer."""


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pairs(n: int = 40, long_every: int = 0) -> list[dict[str, str]]:
    return [{"prompt": f"question {i}?", "response": f"answer {i}" + ("!" * 300 if long_every and i % long_every == 0
                                                                    else "")} for i in range(n)]


def module(path: Path, **kwargs: Any) -> InstructDataModule:
    settings = {"seq_len": 128, "batch_size": 2, "val_fraction": 0.25, **kwargs}
    data = InstructDataModule(str(path), **settings)
    data.setup()
    return data


def texts(ids: np.ndarray | torch.Tensor) -> str:
    return bytes(int(i) for i in ids).decode()


def test_a_prompt_response_pair_trains_on_its_answer_and_eos_only(tmp_path: Path) -> None:
    data = module(jsonl(tmp_path / "qa.jsonl", pairs()))
    ds = data._train
    for i in range(len(ds)):  # type: ignore[arg-type]
        ids, labels = ds[i]  # type: ignore[index]
        assert texts(ids[:-1]).startswith("### Instruction:\nquestion ") and int(ids[-1]) == BYTES_EOS
        n = texts(ids[:-1]).index("### Response:\n") + len("### Response:\n")
        assert (labels[:n] == IGNORE_INDEX).all() and torch.equal(labels[n:], ids[n:])  # answer + EOS, nothing else
        assert texts(ids[n:-1]).startswith("answer ")
    figures = data.figures()
    assert figures["data/format"] == "prompt/response: columns prompt, response"
    assert figures["data/examples"] == 40 and figures["data/rows"] == 40
    answers = sum(len(f"answer {i}") + 1 for i in range(40))
    prompts = sum(len(PAIR_TEMPLATE.replace("{prompt}", f"question {i}?")) for i in range(40))
    assert figures["data/answer_tokens"] == figures["data/loss_tokens"] == answers
    assert figures["data/prompt_tokens"] == prompts
    assert data.prompt_format == {"kind": "pair", "template": PAIR_TEMPLATE, "eos_id": BYTES_EOS}


def test_the_loaders_pad_per_batch_with_the_prompt_out_of_the_loss(tmp_path: Path) -> None:
    data = module(jsonl(tmp_path / "qa.jsonl", pairs()))
    x, y = next(iter(data.val_dataloader()))
    counted = int((y != IGNORE_INDEX).sum())
    assert x.shape == y.shape and x.shape[0] == 2
    assert 0 < counted < x.numel() // 2  # the answers: a fraction of each row


def test_alpaca_rows_are_recognised_with_their_two_templates(tmp_path: Path) -> None:
    rows = [{"instruction": f"do {i}", "input": "with this" if i % 2 else "", "output": f"done {i}"} for i in range(20)]
    data = module(jsonl(tmp_path / "alpaca.jsonl", rows), val_fraction=0.1, seq_len=256)
    assert data.figures()["data/format"].startswith("Alpaca")
    seen = set()
    for i in range(len(data._train)):  # type: ignore[arg-type]
        ids, labels = data._train[i]  # type: ignore[index]
        text = texts(ids[:-1])
        assert text.startswith("Below is an instruction that describes a task")
        seen.add("### Input:\nwith this" in text)
        answer = texts(ids[labels != IGNORE_INDEX][:-1])
        assert answer.startswith("done ") and text.endswith("### Response:\n" + answer)
    assert seen == {True, False}
    assert ALPACA_TEMPLATE.count("{input}") == 1 and "{input}" not in ALPACA_NO_INPUT_TEMPLATE


def chat_rows(n: int = 24) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": f"hello {i}"},
                          {"role": "user", "content": "and?"}, {"role": "assistant", "content": f"bye {i}"}]}
            for i in range(n)]


def _chat_tokenizer(tmp_path: Path, template: str) -> Path:
    from transformers import AutoTokenizer

    save_tokenizer(tmp_path / "tok")
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    tok.chat_template = template
    tok.save_pretrained(str(tmp_path / "tok"))
    return tmp_path / "tok"


@pytest.mark.parametrize("template", [CHAT, PLAIN_CHAT], ids=["eos-in-template", "eos-added"])
def test_every_assistant_turn_of_a_chat_is_an_answer_ending_in_eos(tmp_path: Path, template: str) -> None:
    from transformers import AutoTokenizer

    path = _chat_tokenizer(tmp_path, template)
    tok = AutoTokenizer.from_pretrained(str(path))
    data = module(jsonl(tmp_path / "chat.jsonl", chat_rows()), tokenizer=str(path), messages_column="messages")
    for i in range(len(data._train)):  # type: ignore[arg-type]
        ids, labels = data._train[i]  # type: ignore[index]
        answers = [k for k in range(len(ids)) if labels[k] != IGNORE_INDEX]
        spans = np.split(np.array(answers), np.flatnonzero(np.diff(answers) > 1) + 1)
        assert len(spans) == 2  # both assistant turns, nothing else
        for span in spans:
            assert int(ids[span[-1]]) == tok.eos_token_id or int(ids[span].tolist().count(tok.eos_token_id)) == 1
        said = [tok.decode(ids[s].tolist(), skip_special_tokens=True).strip() for s in spans]
        assert said[0].startswith("hello") and said[1].startswith("bye"), said
        assert "hi" not in tok.decode(ids[answers].tolist())  # the user's turns are out of the loss
    assert data.prompt_format is not None and data.prompt_format["kind"] == "chat"


def test_bytes_render_a_chat_with_data_chat_template_and_csv_cells_hold_json(tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame({"conversation": [json.dumps(r["messages"]) for r in chat_rows()]})
    frame.to_csv(tmp_path / "chat.csv", index=False)
    data = module(tmp_path / "chat.csv", messages_column="conversation", chat_template=PLAIN_CHAT)
    ids, labels = data._train[0]  # type: ignore[index]
    answers = texts(ids[labels != IGNORE_INDEX])
    assert answers.count(chr(BYTES_EOS)) == 2 and "[user]" not in answers and answers.startswith("hello ")


def test_train_on_all_puts_every_token_in_the_loss(tmp_path: Path) -> None:
    data = module(jsonl(tmp_path / "qa.jsonl", pairs()), train_on="all")
    ids, labels = data._train[0]  # type: ignore[index]
    assert torch.equal(ids, labels)
    figures = data.figures()
    assert figures["data/loss_tokens"] == figures["data/prompt_tokens"] + figures["data/answer_tokens"] - 40


def test_seq_len_cuts_long_answers_and_leaves_out_what_has_none_left(tmp_path: Path) -> None:
    rows = pairs(40, long_every=4)  # 10 answers of 300+ bytes
    rows[1]["prompt"] = "x" * 400  # a prompt that fills seq_len alone
    data = module(jsonl(tmp_path / "qa.jsonl", rows))
    figures = data.figures()
    assert figures["data/truncated_rows"] == 10 and figures["data/examples"] == 39
    assert figures["data/cut_part"] == "the end of the answer, and its EOS"
    assert figures["data/dropped_by"] == "data.seq_len (the prompt fills it: no answer left): 1"
    for i in range(len(data._train)):  # type: ignore[arg-type]
        assert len(data._train[i][0]) <= 129  # type: ignore[index]


def test_packed_rows_are_full_and_of_one_shape(tmp_path: Path) -> None:
    rows = [{"prompt": f"question {i}?", "response": "a" * (1 + i * 7 % 97)} for i in range(400)]  # varied lengths
    data = module(jsonl(tmp_path / "qa.jsonl", rows), packing=True, seq_len=256)
    figures = data.figures()
    assert figures["data/packs"] == len(data._train)  # type: ignore[arg-type]
    assert figures["data/examples_per_pack"] > 2 and figures["data/packing_padding_pct"] < 5
    inputs, targets = next(iter(data.train_dataloader()))
    assert isinstance(inputs, PackedInputs) and inputs.input_ids.shape == targets.shape == (2, 256)
    counted = sum(int((t != IGNORE_INDEX).sum()) for _, t in data.train_dataloader())
    assert counted <= figures["data/loss_tokens"]  # drop_last: at most every training answer
    assert InstructDataModule.traits(packing=True).shapes_vary is False
    assert InstructDataModule.traits(packing=False).pads_per_batch is True


def test_instruction_datas_line_says_one_row_in_the_singular() -> None:
    """The data section's line: "packed into 1 row", "1 example", not "1 rows" (as issue 85's "1 chunks")."""
    from runner.data.instruct.summary import describe

    own = {"data/format": "prompt/response", "data/examples": 1, "data/prompt_tokens": 3,
           "data/answer_tokens": 4, "data/loss_tokens": 4, "data/packs": 1, "data/examples_per_pack": 1.0,
           "data/packing_padding_pct": 0.0}
    line = describe(own)
    assert "; 1 example, 3 prompt" in line and "packed into 1 row (" in line, line
