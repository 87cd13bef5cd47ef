"""Every turn of a conversation accounted for (issue 75): a role the chat format does not have is refused before the
run (its file and line, the roles found, the fix), or mapped by ``data.roles``; ShareGPT's ``from``/``value`` is
read, recognised by its column as Alpaca is; the data section counts the assistant turns trained on, those
``data.seq_len`` cut off and the other turns. On a tokenizer of one's own with a chat template that renders any
role (the case where a turn could fall out of the loss without a word)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runner.config import ConfigError
from runner.config.composing.precheck import precheck
from runner.data.instruct import InstructDataModule
from runner.data.sequences.padding import IGNORE_INDEX
from tests.cli import run_cli
from tests.own_llm import chat_rows, jsonl, own_llm, questions, sharegpt_rows
from tests.test_data_bad_input import refused_in_one_paragraph


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return own_llm(tmp_path_factory.mktemp("own") / "llm")


def data(path: Path, llm: Path, **kwargs: Any) -> InstructDataModule:
    module = InstructDataModule(str(path), tokenizer=str(llm), **{"seq_len": 128, "batch_size": 2, **kwargs})
    module.setup()
    return module


def answer_runs(module: InstructDataModule) -> int:
    """The answers in the loss, counted from the examples' labels themselves: runs of targets in the loss."""
    runs = 0
    for ds in (module._train, module._val):
        for i in range(len(ds)):  # type: ignore[arg-type]
            _, labels = ds[i]  # type: ignore[index]
            on = np.asarray(labels != IGNORE_INDEX, dtype=np.int8)
            runs += int((np.diff(on, prepend=0) > 0).sum())
    return runs


def run(llm: Path, path: Path, *more: str) -> list[str]:
    return ["model=hf_causal_lm", f"model.path={llm}", "data=instruct", f"data.path={path}", "data.seq_len=128",
            "data.batch_size=2", "compile.backend=eager", *more]


def test_a_role_the_format_does_not_have_is_refused_with_its_line_the_roles_and_the_fix(tmp_path: Path,
                                                                                         llm: Path) -> None:
    rows = chat_rows(20)
    for r in rows[7:]:
        r["messages"][3]["role"] = "bot"  # the second answer of rows 8.. (lines 8..) in a role no rule names
    path = jsonl(tmp_path / "chat.jsonl", rows)
    refused_in_one_paragraph(run(llm, path), [
        f"data.path={path}, line 8: a turn of messages has the role 'bot'", "none of the chat format's (system, user, "
        "assistant)", "roles found: user 40, assistant 27, bot (no rule) 13", "fall out of the loss",
        "+data.roles.bot=assistant", "+data.roles.bot=bot"])
    work = tmp_path / "work"
    work.mkdir()
    out = run_cli(*run(llm, path), cwd=work)
    assert out.returncode == 2 and list(work.iterdir()) == [], out.stderr[-2000:]
    precheck(run(llm, path, "+data.roles.bot=assistant"))  # the fix the refusal names composes and passes


def test_data_roles_maps_a_role_and_every_turn_is_counted(tmp_path: Path, llm: Path) -> None:
    plain = data(jsonl(tmp_path / "chat.jsonl", chat_rows(20)), llm, messages_column="messages")
    bot = jsonl(tmp_path / "bot.jsonl", chat_rows(20, second_role="bot"))
    mapped = data(bot, llm, roles={"bot": "assistant"})  # the column found by its name, messages
    for module in (plain, mapped):
        figures = module.figures()
        assert figures["data/turns_trained"] == 40 and figures["data/turns_cut"] == 0
        assert figures["data/turns_prompt"] == 40 and answer_runs(module) == 40
    assert mapped.figures()["data/loss_tokens"] == plain.figures()["data/loss_tokens"]
    assert mapped.figures()["data/roles"] == "user 40, assistant 20, bot -> assistant 20"
    kept = data(bot, llm, roles={"bot": "bot"}).figures()  # kept as it is: rendered, never trained on, and said so
    assert kept["data/turns_trained"] == 20 and kept["data/turns_prompt"] == 60
    assert kept["data/loss_tokens"] < plain.figures()["data/loss_tokens"]


def test_turns_data_seq_len_cuts_off_are_counted_as_not_trained_on(tmp_path: Path, llm: Path) -> None:
    module = data(jsonl(tmp_path / "chat.jsonl", chat_rows(20)), llm, seq_len=40)
    figures = module.figures()
    trained = figures["data/turns_trained"]
    assert trained == answer_runs(module) and 0 < trained < 40
    assert figures["data/turns_cut"] == 40 - trained and figures["data/truncated_rows"] > 0


def test_sharegpt_is_read_as_chat_by_its_shape(tmp_path: Path, llm: Path) -> None:
    share = data(jsonl(tmp_path / "share.jsonl", sharegpt_rows(20)), llm)  # no data.messages_column
    same = [{"messages": [{"role": {"human": "user", "gpt": "assistant"}.get(t["from"], t["from"]),
                           "content": t["value"]} for t in r["conversations"]]} for r in sharegpt_rows(20)]
    plain = data(jsonl(tmp_path / "same.jsonl", same), llm)
    figures = share.figures()
    assert figures["data/format"] == "chat: column conversations, ShareGPT from/value turns (every assistant " \
                                        "turn an answer)"
    assert figures["data/roles"] == "gpt -> assistant 40, human -> user 40, system 20"
    assert figures["data/turns_trained"] == 40 and figures["data/turns_prompt"] == 60
    for i in range(len(share._train)):  # type: ignore[arg-type]
        assert (share._train[i] == plain._train[i]).all()  # type: ignore[index]  # the same ids, the same answers


def test_hints_about_chat_columns_name_both_shapes(tmp_path: Path, llm: Path) -> None:
    dialog = jsonl(tmp_path / "dialog.jsonl", [{"dialog": r["conversations"]} for r in sharegpt_rows(8)])
    refused_in_one_paragraph(run(llm, dialog), [
        "has no column prompt", "{\"role\", \"content\"} turns (system, user, assistant) or ShareGPT's {\"from\", "
        "\"value\"} (human, gpt, system)", "data.messages_column=dialog", "named messages or conversations"])
    broken = jsonl(tmp_path / "broken.jsonl", [{"messages": [{"speaker": "user", "text": "hi"}]}] * 8)
    refused_in_one_paragraph(run(llm, broken), ["cannot be read as conversations", "ShareGPT's {\"from\", \"value\"}"])


def test_a_json_arrays_row_is_found_by_its_line(tmp_path: Path, llm: Path) -> None:
    rows = chat_rows(6)
    rows[3]["messages"][3]["role"] = "bot"
    text = json.dumps(rows, indent=1)
    (tmp_path / "chat.json").write_text(text)
    line = [n for n, t in enumerate(text.splitlines(), 1) if t == " {"][3]  # where the 4th element starts
    with pytest.raises(ConfigError, match=rf"chat.json, line {line}, its element 4: a turn of messages has the role"):
        precheck(run(llm, tmp_path / "chat.json"))


def varied_conversations() -> list[list[dict[str, str]]]:
    """Conversations of every kind a chat file holds: a system turn or none, one to three answers, a user turn
    after the last answer, two answers in a row, a role mapped to the assistant and one kept as it is, spaces a
    template may trim, text beyond ASCII, and an answer long enough for data.seq_len to cut."""
    out = []
    for i, (q, a) in enumerate(questions(24)):
        turns = [{"role": "system", "content": "Answer with a colour."}] if i % 3 == 0 else []
        turns += [{"role": "user", "content": q}, {"role": "assistant", "content": f" {a} " if i % 4 == 1 else a}]
        for k in range(i % 3):
            turns += [{"role": "tool" if k else "user", "content": f"Sure{'?' * k} ünïcode {i}"},
                      {"role": "bot" if i % 2 else "assistant", "content": f"Yes, {a}." + " really" * (20 * k)}]
        if i % 5 == 2:
            turns.append({"role": "assistant", "content": "And nothing else."})
        if i % 6 == 4:
            turns.append({"role": "user", "content": "Thanks!"})
        out.append(turns)
    return out


def reference_example(messages: list[dict[str, str]], render: Any, tokenize: Any, eos: int) -> tuple[list[int],
                                                                                                    list[int]]:
    """A conversation's ids and loss mask as runner made them before its chat rendering got faster (419c487),
    written out plainly: every prefix rendered (``render``: ``apply_chat_template``), the text each assistant turn
    adds to the generation prompt an answer, each piece tokenized on its own, an EOS after an answer without one."""
    full, ids, mask, at = render(messages, False), [], [], 0
    cuts = [(len(render(messages[:i], True)), len(render(messages[:i + 1], False)))
            for i, m in enumerate(messages) if m["role"] == "assistant"]
    pieces: list[tuple[str, bool]] = []
    for start, end in cuts:
        pieces += [(full[at:start], False)] if start > at else []
        pieces.append((full[start:end], True))
        at = end
    pieces += [(full[at:], False)] if at < len(full) else []
    for text, answer in pieces:
        piece = tokenize(text)
        piece += [eos] if answer and eos not in piece else []
        ids += piece
        mask += [int(answer)] * len(piece)
    return ids, mask


@pytest.mark.parametrize("tokenizer", ["own", "bytes"])
@pytest.mark.parametrize("shape", ["messages", "sharegpt"])
def test_chat_examples_are_the_ids_and_answers_every_prefix_rendered_gives(tmp_path: Path, llm: Path, tokenizer: str,
                                                                            shape: str) -> None:
    """The chat encoder renders straight from the compiled template and renders the whole conversation once: the
    ids and the loss's mask of every example are still exactly those of each prefix rendered by
    ``apply_chat_template`` and each piece tokenized on its own, cut where data.seq_len cuts."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(llm))
    trim = ("{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant] {% endif %}")  # no EOS of its own: runner adds it
    conversations = varied_conversations()
    if shape == "sharegpt":
        names = {"user": "human", "assistant": "gpt", "system": "system", "bot": "chatgpt", "tool": "tool"}
        rows: list[dict[str, Any]] = [{"conversations": [{"from": names[m["role"]], "value": m["content"]}
                                                         for m in c]} for c in conversations]
    else:
        rows = [{"messages": c} for c in conversations]
    roles = {"bot": "assistant", "tool": "tool"} if shape == "messages" else {"tool": "tool"}
    mapped = [[{**m, "role": "assistant" if m["role"] == "bot" else m["role"]} for m in c] for c in conversations]
    if tokenizer == "own":
        def render(m: Any, g: bool) -> str:
            return str(tok.apply_chat_template(m, tokenize=False, add_generation_prompt=g))
        references = [reference_example(c, render, lambda t: tok(t, add_special_tokens=False)["input_ids"],
                                        tok.eos_token_id) for c in mapped]
        settings: dict[str, Any] = {"tokenizer": str(llm)}
    else:
        def render(m: Any, g: bool) -> str:
            return str(tok.apply_chat_template(m, tokenize=False, add_generation_prompt=g, chat_template=trim,
                                               bos_token="", eos_token=""))
        references = [reference_example(c, render, lambda t: list(t.encode()), 4) for c in mapped]
        settings = {"tokenizer": "bytes", "chat_template": trim}
    seq_len = 160
    module = InstructDataModule(str(jsonl(tmp_path / "chat.jsonl", rows)), roles=roles, seq_len=seq_len,
                                batch_size=2, val_fraction=0.25, **settings)
    module.setup()
    expected = {}
    for ids, mask in references:
        ids, mask = ids[:seq_len + 1], mask[:seq_len + 1]
        if any(mask[1:]):  # an example whose answers data.seq_len cuts off entirely is left out
            expected[tuple(ids)] = [i if m else IGNORE_INDEX for i, m in zip(ids, mask, strict=True)]
    got = {}
    for ds in (module._train, module._val):
        for i in range(len(ds)):  # type: ignore[arg-type]
            ids, labels = ds[i]  # type: ignore[index]
            got[tuple(ids.tolist())] = labels.tolist()
    assert got == expected
    assert any(len(ids) > seq_len for ids, _ in references)  # data.seq_len did cut
