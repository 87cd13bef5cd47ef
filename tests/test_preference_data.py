"""Preference data (``data=preference``): the four shapes TRL reads, from every table format the instruction data
reads, the loss on the completions only (counted from the files themselves), what ``data.seq_len`` cuts and leaves
out, identical pairs left out and counted, and batches that hold both sequences of every pair in one fixed shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from runner.data.instruct.formats import PAIR_TEMPLATE
from runner.data.preference import PreferenceDataModule
from runner.data.preference.formats import split_text
from runner.data.sequences.padding import IGNORE_INDEX, PadTo

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "examples" / "data" / "preference.jsonl"
CHATS = ROOT / "examples" / "data" / "preference_chat.jsonl"
TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _rows(path: Path, n: int | None = None) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in (lines[:n] if n else lines)]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _data(path: Path | str, **kwargs: Any) -> PreferenceDataModule:
    data = PreferenceDataModule(str(path), **{"seq_len": 256, "batch_size": 4, **kwargs})
    data.setup()
    return data


def test_the_shipped_pairs_train_on_their_completions_only() -> None:
    rows = _rows(SHIPPED, 300)
    data = _data(SHIPPED, max_examples=300)
    f = data.figures()
    # Bytes: each completion's bytes and its EOS are in the loss; the prompt (in its template) is read once a pair.
    assert f["data/pairs"] == 300
    assert f["data/completion_tokens"] == f["data/loss_tokens"] == sum(
        len(r["chosen"].encode()) + len(r["rejected"].encode()) + 2 for r in rows)
    assert f["data/prompt_tokens"] == sum(len(PAIR_TEMPLATE.replace("{prompt}", r["prompt"]).encode()) for r in rows)
    assert f["data/format"] == "preference pairs: columns prompt, chosen/rejected"
    assert f["data/train_sequences"] + f["data/val_sequences"] == 300 and f["data/truncated_rows"] == 0
    assert data.prompt_format == {"kind": "pair", "template": PAIR_TEMPLATE, "eos_id": 4}


def test_a_padded_batch_holds_both_sequences_of_each_pair_and_their_completions() -> None:
    rows = _rows(SHIPPED, 40)
    data = _data(SHIPPED, max_examples=40, pad_to=PadTo((64, 128)))
    inputs, targets = next(iter(data.val_dataloader()))
    b = data.batch_size
    assert inputs.ids.shape == targets.shape == inputs.slots.shape == (2 * b, 128)  # the bucket the longest fits
    assert inputs.pairs.shape == (b,) and inputs.reference.shape == (2 * b,)
    for p in range(b):
        if inputs.pairs[p] == 0:
            assert (targets[[p, b + p]] == IGNORE_INDEX).all()  # an empty slot: no target
            continue
        row = rows[int(data.datasets["val"].fitted.rows[int(inputs.index[p])])]
        for side, key in ((0, "chosen"), (1, "rejected")):
            got = targets[side * b + p]
            assert bytes(got[got != IGNORE_INDEX].tolist()) == row[key].encode() + b"\x04"  # the completion, its EOS
            assert (inputs.slots[side * b + p] == side * b + p).all()


def test_the_last_batch_is_filled_with_empty_pairs_so_every_batch_has_one_shape() -> None:
    data = _data(SHIPPED, max_examples=47, batch_size=4)  # 5 validation pairs: a batch of 4, then one of 1
    shapes = [(tuple(x.ids.shape), int(x.pairs.sum())) for x, _ in data.val_dataloader()]
    assert [n for _, n in shapes] == [4, 1] and all(s[0] == 8 for s, _ in shapes)


def test_packed_rows_hold_whole_pairs_sharing_their_prompt() -> None:
    rows = _rows(SHIPPED, 60)
    data = _data(SHIPPED, max_examples=60, seq_len=128, packing=True)
    train = data.datasets["train"]
    inputs, targets = next(iter(data.train_dataloader()))
    k = train.per_row  # type: ignore[union-attr]
    assert inputs.ids.input_ids.shape == targets.shape == (4, 256) and inputs.pairs.shape == (4 * k,)
    assert data.figures()["data/batch_shape"] == "[4, 256] every batch (packed rows)"
    p = inputs.pair_slots
    for slot in range(p):
        if inputs.pairs[slot] == 0:
            assert not (inputs.slots[targets != IGNORE_INDEX] % p == slot).any()
            continue
        row = rows[int(train.fitted.rows[int(inputs.index[slot])])]
        for side, key in ((0, "chosen"), (1, "rejected")):
            mine = targets[(inputs.slots == side * p + slot) & (targets != IGNORE_INDEX)]
            assert bytes(mine.tolist()) == row[key].encode() + b"\x04"
    # The prompt but its last id once (a document of its own, and its own parent), then each completion (a document
    # whose parent is the prompt's) starting with the prompt's last id, its positions going on from the prompt's.
    ids, docs, parents = inputs.ids.input_ids[0], inputs.ids.document_ids[0], inputs.ids.parent_ids[0]
    positions = inputs.ids.position_ids[0]
    pair = train.fitted  # type: ignore[union-attr]
    i = int(inputs.index[0])
    prompt = len(pair.sequence(i, 0)[0]) - len(pair.sequence(i, 0)[0][pair.sequence(i, 0)[1]:])
    assert (docs[:prompt - 1] == 0).all() and (parents[:prompt - 1] == 0).all()
    for side in (0, 1):
        mine = docs == 1 + side
        assert (parents[mine] == 0).all() and positions[mine][0] == prompt - 1
        assert int(ids[mine][0]) == int(pair.sequence(i, side)[0][prompt - 1])  # the prompt's last id


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet", "saved"])
def test_every_table_format_gives_the_same_pairs(fmt: str, tmp_path: Path) -> None:
    import datasets

    rows = _rows(SHIPPED, 60)
    table = datasets.Dataset.from_list(rows)
    path = tmp_path / f"pairs.{fmt}"
    if fmt == "jsonl":
        _jsonl(path, rows)
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "csv":
        table.to_csv(str(path), index=False)
    elif fmt == "parquet":
        table.to_parquet(str(path))
    else:
        table.save_to_disk(str(path))
    ours, shipped = _data(path).figures(), _data(SHIPPED, max_examples=60).figures()
    for key in ("data/pairs", "data/completion_tokens", "data/prompt_tokens"):
        assert ours[key] == shipped[key], key


def test_conversations_with_an_explicit_prompt_render_with_the_chat_template(tmp_path: Path) -> None:
    rows = [{"prompt": [{"role": "user", "content": f"q{i}"}], "chosen": [{"role": "assistant", "content": f"yes {i}"}],
             "rejected": [{"role": "assistant", "content": "no"}]} for i in range(20)]
    data = _data(_jsonl(tmp_path / "chat.jsonl", rows), chat_template=TEMPLATE)
    f = data.figures()
    assert f["data/format"].startswith("preference conversations: columns prompt")
    assert f["data/prompt_tokens"] == sum(len(f"<|user|>q{i}<|assistant|>") for i in range(20))
    assert f["data/completion_tokens"] == sum(len(f"yes {i}") + 1 + len("no") + 1 for i in range(20))
    assert data.prompt_format is not None and data.prompt_format["kind"] == "chat"


def test_sharegpt_conversations_and_roles_mapped_by_data_roles_read_as_their_chat_roles(tmp_path: Path) -> None:
    plain = [{"prompt": [{"role": "user", "content": f"q{i}"}], "chosen": [{"role": "assistant", "content": "yes"}],
              "rejected": [{"role": "assistant", "content": "no"}]} for i in range(20)]
    sharegpt = [{"prompt": [{"from": "human", "value": f"q{i}"}], "chosen": [{"from": "gpt", "value": "yes"}],
                 "rejected": [{"from": "gpt", "value": "no"}]} for i in range(20)]
    bot = [{"prompt": [{"role": "user", "content": f"q{i}"}], "chosen": [{"role": "bot", "content": "yes"}],
            "rejected": [{"role": "bot", "content": "no"}]} for i in range(20)]
    want = _data(_jsonl(tmp_path / "plain.jsonl", plain), chat_template=TEMPLATE).figures()
    for name, rows, extra in (("sharegpt", sharegpt, {}), ("bot", bot, {"roles": {"bot": "assistant"}})):
        got = _data(_jsonl(tmp_path / f"{name}.jsonl", rows), chat_template=TEMPLATE, **extra).figures()
        for key in ("data/pairs", "data/prompt_tokens", "data/completion_tokens"):
            assert got[key] == want[key], (name, key)


def test_conversations_with_an_implicit_prompt_share_their_first_turns() -> None:
    rows = _rows(CHATS)
    data = _data(CHATS, chat_template=TEMPLATE)
    f = data.figures()
    assert f["data/format"].startswith("preference conversations: columns chosen/rejected, the prompt")
    # The completion is the last assistant turn alone; what comes before is the prompt, with the generation prompt.
    assert f["data/completion_tokens"] == sum(len(r["chosen"][-1]["content"].encode()) + len(
        r["rejected"][-1]["content"].encode()) + 2 for r in rows)


def test_texts_with_an_implicit_prompt_split_where_trl_splits_them(tmp_path: Path) -> None:
    t = split_text("\n\nHuman: hi\n\nAssistant: Hello there", "\n\nHuman: hi\n\nAssistant: Go away")
    assert (t.prompt, t.chosen, t.rejected) == ("\n\nHuman: hi\n\nAssistant:", " Hello there", " Go away")
    rows = [{"chosen": f"Q{i}: A good", "rejected": f"Q{i}: A bad"} for i in range(20)]
    data = _data(_jsonl(tmp_path / "hh.jsonl", rows))
    f = data.figures()
    assert f["data/format"] == "preference texts: columns chosen/rejected, the prompt their shared start"
    assert f["data/completion_tokens"] == 20 * (len(" good") + len(" bad") + 2)  # the space goes with them
    assert data.prompt_format == {"kind": "pair", "template": "{prompt}", "eos_id": 4}


def test_identical_pairs_are_left_out_and_counted(tmp_path: Path) -> None:
    rows = [*_rows(SHIPPED, 40), *[{"prompt": "p", "chosen": "same", "rejected": "same"}] * 3]
    f = _data(_jsonl(tmp_path / "pairs.jsonl", rows)).figures()
    assert f["data/pairs"] == 40
    assert "chosen identical to rejected: 3" in f["data/dropped_by"] and f["data/dropped_rows"] == 3


def test_pairs_longer_than_seq_len_are_cut_and_counted_and_those_left_no_room_left_out(tmp_path: Path) -> None:
    long = "x" * 200
    rows = [*_rows(SHIPPED, 40), {"prompt": "q", "chosen": long, "rejected": "short"},
            {"prompt": "y" * 300, "chosen": "a", "rejected": "b"},
            {"prompt": "q", "chosen": long + "1", "rejected": long + "2"}]  # the same once cut
    data = _data(_jsonl(tmp_path / "pairs.jsonl", rows), seq_len=192)
    f = data.figures()
    assert f["data/pairs"] == 41 and f["data/truncated_rows"] == 1
    assert f["data/cut_part"] == "the end of the completion, and its EOS"
    assert "data.seq_len (the prompt fills it: no completion left): 1" in f["data/dropped_by"]
    assert "chosen identical to rejected once cut at data.seq_len: 1" in f["data/dropped_by"]
    positions = np.concatenate([d.fitted.positions().ravel() for d in data.datasets.values()])
    assert positions.max() == 192  # cut at seq_len positions, never more


def test_a_prompt_shared_by_two_completions_is_attended_by_both_and_they_not_by_each_other() -> None:
    """The dense mask with parents: a completion sees its prompt (its parent) and its own earlier positions, never
    the other completion; FlexAttention's block mask computes the same attention (forward: torch 2.13 has no
    FlexAttention backward on the CPU)."""
    from torch.nn.attention.flex_attention import flex_attention

    from runner.packing import block_document_mask, dense_document_mask

    # prompt 0 (3 positions), chosen 1 (2), rejected 2 (2), the next pair's prompt 3 (1) and chosen 4 (1).
    docs = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 3, 4]])
    parents = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 3, 3]])
    mask = dense_document_mask(docs, parents)[0, 0]
    assert mask[5].tolist() == [True, True, True, False, False, True, False, False, False]  # rejected: prompt, itself
    assert mask[4].tolist() == [True, True, True, True, True, False, False, False, False]  # chosen: prompt, its own
    assert mask[8].tolist() == [False] * 7 + [True, True]
    torch.manual_seed(0)
    docs = torch.repeat_interleave(torch.arange(9), torch.tensor([100, 40, 60, 30, 20, 10, 50, 30, 172]))[None]
    parents = torch.tensor([0, 0, 0, 3, 3, 3, 6, 6, 8]).repeat_interleave(
        torch.tensor([100, 40, 60, 30, 20, 10, 50, 30, 172]))[None]
    q, k, v = (torch.randn(1, 2, 512, 16) for _ in range(3))
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense_document_mask(docs, parents))
    flex = flex_attention(q, k, v, block_mask=block_document_mask(docs, parent_ids=parents))
    torch.testing.assert_close(flex, dense, rtol=1e-5, atol=1e-5)


def test_pairs_are_prepared_once_into_a_store_named_by_their_content_and_settings(tmp_path: Path) -> None:
    """Issue 77's store for preference pairs: a second read (another process) maps the store the first wrote; a
    touched file is the same data; another ``data.roles`` or changed rows are another store; the ids read back are
    the tokenizer's."""
    from runner.data.preference.read import _PREPARED, prepare_pairs
    from runner.data.store.shared import origin
    from runner.data.tokens.tokenizers import load_tokenizer

    path = _jsonl(tmp_path / "pairs.jsonl", _rows(SHIPPED, 40))
    tokenizer = load_tokenizer("bytes")
    settings = dict(prompt_column="prompt", chosen_column="chosen", rejected_column="rejected", prompt_template=None,
                    chat_template=None, max_examples=None)

    def fresh(roles: dict[str, str] | None = None) -> Any:
        _PREPARED.clear()  # a new process
        return prepare_pairs(str(path), "data.path", tokenizer, None, **settings, roles=roles)  # type: ignore[arg-type]

    first = fresh()
    assert first.built and first.rows == 40 and first.store.meta["same"] == 0
    prompt = np.asarray(first.store.ragged("prompt_ids").values[:])
    starts, ends = first.store.ragged("prompt_ids").bounds()
    expected = PAIR_TEMPLATE.replace("{prompt}", _rows(SHIPPED, 1)[0]["prompt"]).encode()
    assert bytes(prompt[starts[0]:ends[0]].tolist()) == expected
    path.touch()
    again = fresh()
    assert not again.built and again.stamp == first.stamp
    assert "not tokenized again" in origin(again.store, again.built)  # what the log says of it
    assert fresh({"bot": "assistant"}).stamp != first.stamp
    _jsonl(path, _rows(SHIPPED, 41))
    changed = fresh()
    assert changed.built and changed.rows == 41 and changed.stamp != first.stamp
