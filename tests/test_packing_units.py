"""Packing's parts without a model: best-fit decreasing, the rows it makes, and the masks built from them."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from runner.data.sequences.packed import Examples, Packs, pack_collate
from runner.data.sequences.padding import IGNORE_INDEX, PadCollate, PadTo
from runner.data.sequences.windows import Spans
from runner.packing import PackedInputs, best_fit_decreasing, block_document_mask, dense_document_mask


def test_best_fit_decreasing_places_every_example_once_within_capacity() -> None:
    rng = random.Random(0)
    lengths = [rng.randint(1, 200) for _ in range(3000)]
    rows = best_fit_decreasing(lengths, 256)
    placed = sorted(i for row in rows for i in row)
    assert placed == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 256 for row in rows)
    # Longest first in each row; the same rows every time (every rank computes them alone).
    assert all(lengths[row[0]] == max(lengths[i] for i in row) for row in rows)
    assert rows == best_fit_decreasing(lengths, 256)
    # Near the bound: no packing can use fewer rows than the total over the capacity.
    assert len(rows) <= -(-sum(lengths) // 256) + 2


def test_best_fit_takes_the_row_with_least_room_that_holds_the_example() -> None:
    # 6 opens row 0 (room 4), 5 opens row 1 (room 5), 3 fits both: best fit is row 0 (room 4 -> 1), not row 1.
    assert best_fit_decreasing([6, 5, 3], 10) == [[0, 2], [1]]
    with pytest.raises(ValueError, match="outside 1..10"):
        best_fit_decreasing([11], 10)


def test_stdlib_paragraph_lengths_pack_with_under_two_percent_padding() -> None:
    """The issue's target on a real length distribution: the stdlib's paragraphs (what the hf_varlen workload
    reads), chunked at 512 bytes as data=text_documents does."""
    from runner.data.reading.corpus import read_documents

    docs = read_documents(None, 2_000_000)
    lengths = [min(len(p), 513) - 1 for d in docs for p in d.split(b"\n\n") if len(p) > 16]
    rows = best_fit_decreasing(lengths, 512)
    padding = 1 - sum(lengths) / (len(rows) * 512)
    assert padding <= 0.02, padding


def _examples() -> Examples:
    ids = np.arange(100, 130, dtype=np.int64)
    mask = np.zeros(30, dtype=np.int8)
    mask[[3, 4, 12, 13, 14, 25, 26]] = 1  # each example's answer: its last ids
    spans = Spans([0, 5, 15, 20], [5, 15, 20, 27])  # examples of 5, 10, 5, 7 ids
    return Examples(ids, spans, mask, answers_only=True)


def test_a_pack_row_keeps_each_examples_targets_and_restarts_positions() -> None:
    packs = Packs(_examples(), seq_len=16, pad_id=0)
    assert sorted(i for row in packs.rows for i in row) == [0, 1, 2, 3]
    assert packs.positions == 4 + 9 + 4 + 6
    x, y, pos, doc = packs[0]
    row = packs.rows[0]
    at = 0
    for d, i in enumerate(row):
        ids, labels = packs.examples.labelled(i)
        n = len(ids) - 1
        assert x[at:at + n].tolist() == ids[:-1].tolist()
        assert y[at:at + n].tolist() == labels[1:].tolist()  # the next id of the same example, never the next one's
        assert pos[at:at + n].tolist() == list(range(n)) and set(doc[at:at + n].tolist()) == {d}
        at += n
    assert (y[at:] == IGNORE_INDEX).all() and (doc[at:] == len(row)).all() and (pos[at:] == torch.arange(16 - at)).all()
    # Labels: IGNORE_INDEX outside the answers.
    _, labels = packs.examples.labelled(1)
    assert labels.tolist() == [IGNORE_INDEX] * 7 + [112, 113, 114]


def test_pack_collate_gives_packed_inputs_of_one_shape() -> None:
    packs = Packs(_examples(), seq_len=16, pad_id=0)
    inputs, targets = pack_collate([packs[i] for i in range(len(packs))])
    assert isinstance(inputs, PackedInputs)
    shapes = {t.shape for t in (inputs.input_ids, inputs.position_ids, inputs.document_ids, targets)}
    assert shapes == {torch.Size([len(packs), 16])}
    assert all(t.is_contiguous() for t in (inputs.input_ids, inputs.position_ids, inputs.document_ids, targets))
    assert 0 < packs.figures(batch_size=4)["data/packing_padding_pct"] < 100


def test_pad_collate_takes_labelled_examples() -> None:
    x, y = PadCollate(PadTo(), pad_id=7)([_examples()[0], _examples()[1]])
    assert x.shape == y.shape == (2, 9)
    assert x[0].tolist() == [100, 101, 102, 103, 7, 7, 7, 7, 7]
    assert y[0].tolist() == [IGNORE_INDEX, IGNORE_INDEX, 103, 104] + [IGNORE_INDEX] * 5


def _documents(lengths: list[list[int]]) -> torch.Tensor:
    return torch.tensor([[d for d, n in enumerate(row) for _ in range(n)] for row in lengths])


def test_the_dense_mask_is_causal_within_each_example() -> None:
    docs = _documents([[3, 2, 1]])
    mask = dense_document_mask(docs)[0, 0]
    expected = torch.zeros(6, 6, dtype=torch.bool)
    for a, b in ((0, 3), (3, 5), (5, 6)):
        expected[a:b, a:b] = torch.ones(b - a, b - a, dtype=torch.bool).tril()
    assert torch.equal(mask, expected)


@pytest.mark.parametrize("rows", [[[100, 28, 128, 100, 156]], [[512]], [[1] * 300 + [212]], [[129, 127, 256]],
                                  [[60, 70, 130, 90, 162], [512]]])
def test_the_block_mask_matches_torchs_own_from_the_dense_mask(rows: list[list[int]]) -> None:
    """The block tables derived from each block's first and last example equal what create_block_mask computes by
    evaluating the mask at every position (which the data path never calls: 0.15-0.30 s a call)."""
    from torch.nn.attention.flex_attention import create_block_mask

    docs = _documents(rows)
    ours = block_document_mask(docs)
    theirs = create_block_mask(lambda b, h, q, k: (docs[b, q] == docs[b, k]) & (q >= k), docs.shape[0], None,
                               docs.shape[1], docs.shape[1], device="cpu")
    for name in ("kv_num_blocks", "full_kv_num_blocks"):
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
    for num, idx in (("kv_num_blocks", "kv_indices"), ("full_kv_num_blocks", "full_kv_indices")):
        counts = getattr(ours, num)
        for b in range(counts.shape[0]):
            for q in range(counts.shape[2]):
                n = int(counts[b, 0, q])
                assert sorted(getattr(ours, idx)[b, 0, q, :n].tolist()) == \
                    sorted(getattr(theirs, idx)[b, 0, q, :n].tolist())


def test_flex_attention_with_the_block_mask_equals_sdpa_with_the_dense_mask() -> None:
    """Forward only: torch 2.13's FlexAttention has no backward on the CPU (the reason the CPU path is SDPA)."""
    from torch.nn.attention.flex_attention import flex_attention

    torch.manual_seed(0)
    docs = _documents([[100, 28, 128], [200, 56]])
    q, k, v = (torch.randn(2, 2, 256, 16) for _ in range(3))
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense_document_mask(docs))
    flex = flex_attention(q, k, v, block_mask=block_document_mask(docs))
    torch.testing.assert_close(flex, dense, rtol=1e-5, atol=1e-5)


def test_the_padding_figure_counts_each_rows_trailing_ignored_targets_only() -> None:
    """``dynamic/padding_waste_pct`` counts padding, not an instruction prompt's ignored targets: padding is each
    row's run of ignored targets at its end (an answer ends every example)."""
    from runner.stack.dynamic.policy import trailing_padding

    i = IGNORE_INDEX
    targets = torch.tensor([[i, i, 5, 6, i, i], [i, 3, 4, 5, 6, 7], [1, i, 2, i, i, i]])
    assert int(trailing_padding(targets)) == 2 + 0 + 3


def test_generate_asks_in_the_runs_template() -> None:
    from runner.data.instruct.formats import (
        ALPACA_NO_INPUT_TEMPLATE,
        PAIR_TEMPLATE,
        Format,
        Kind,
        generation_prompt,
        prompt_info,
    )

    pair = prompt_info(Format(Kind.pair, ("prompt", "response")), None, None)
    assert generation_prompt(pair, "2+2?", None) == PAIR_TEMPLATE.replace("{prompt}", "2+2?")
    alpaca = prompt_info(Format(Kind.alpaca, ("instruction", "input", "output")), None, None)
    assert generation_prompt(alpaca, "Sort 3, 1.", None) == ALPACA_NO_INPUT_TEMPLATE.replace("{instruction}",
                                                                                              "Sort 3, 1.")
    own = prompt_info(Format(Kind.pair, ("q", "a"), "Q: {prompt}\nA: "), None, None)
    assert generation_prompt(own, "why?", None) == "Q: why?\nA: "
    chat = prompt_info(Format(Kind.chat, ("messages",)), "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                       "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}", None)
    assert generation_prompt(chat, "hi", None) == "<user>hi<assistant>"
