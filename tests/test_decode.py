"""runner.models.decode: the same greedy tokens as transformers' ``generate``, a handful of compiled shapes for every
prompt length and count, and nothing left behind that changes a training step's compile."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter

from runner.models.decode import Decoder, Sampling, bucket

PROMPTS = [[1, 5, 9, 33, 7], [1, 44, 12], [1, 8, 8, 8, 8, 8, 8, 9, 70, 71, 72]]


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0,
                         bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


def _transformers(model, prompts, new, **kw):
    """transformers' own generate over left-padded prompts: the reference."""
    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                             pad_token_id=0, **kw)
    return out[:, width:].tolist()


def test_buckets_are_powers_of_two_above_a_floor():
    assert [bucket(n, 16) for n in (1, 16, 17, 33)] == [16, 16, 32, 64]
    assert [bucket(n, 1) for n in (1, 2, 3, 5)] == [1, 2, 4, 8]


@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS], ids=["one", "mixed-lengths"])
def test_greedy_tokens_equal_transformers_generate(llama, prompts):
    got = Decoder(llama, compile=False).generate(prompts, Sampling(max_new_tokens=24, temperature=0)).tokens
    assert got == _transformers(llama, prompts, 24, eos_token_id=None)


def test_each_prompt_alone_writes_what_it_writes_in_a_batch(llama):
    decoder = Decoder(llama, compile=False)
    together = decoder.generate(PROMPTS, Sampling(max_new_tokens=16, temperature=0)).tokens
    alone = [decoder.generate([p], Sampling(max_new_tokens=16, temperature=0)).tokens[0] for p in PROMPTS]
    assert together == alone


def test_writing_stops_at_eos_row_by_row(llama):
    decoder = Decoder(llama, compile=False)
    free = decoder.generate(PROMPTS, Sampling(max_new_tokens=12, temperature=0)).tokens
    stop = free[0][3]  # the fourth token the first prompt writes: its answer ends there
    got = decoder.generate(PROMPTS, Sampling(max_new_tokens=12, temperature=0, eos_ids=(stop,))).tokens
    for row, full in zip(got, free, strict=True):
        assert row == (full[:full.index(stop)] if stop in full else full)
    assert got[0] == free[0][:3]


def test_seeded_sampling_repeats_and_a_new_seed_differs(llama):
    decoder = Decoder(llama, compile=False)
    draw = {"max_new_tokens": 32, "temperature": 1.0, "top_k": 0, "top_p": 0.9}
    first = decoder.generate(PROMPTS, Sampling(seed=1, **draw)).tokens
    assert decoder.generate(PROMPTS, Sampling(seed=1, **draw)).tokens == first
    assert decoder.generate(PROMPTS, Sampling(seed=2, **draw)).tokens != first


def _gpt():
    from runner.models.gpt import GPT

    torch.manual_seed(0)
    return GPT(vocab_size=128, n_layer=2, n_head=2, n_embd=32, block_size=256).eval()


@pytest.mark.parametrize("family", ["transformers", "gpt"])
def test_compiled_once_per_bucket_then_no_recompile_across_lengths_and_counts(llama, family):
    model = llama if family == "transformers" else _gpt()
    counter = CompileCounter()
    decoder = Decoder(model, backend=counter)
    greedy = Sampling(max_new_tokens=8, temperature=0)
    expected = Decoder(model, compile=False).generate(PROMPTS, greedy).tokens
    first = decoder.generate(PROMPTS, greedy)
    assert first.tokens == expected
    assert counter.frame_count == 2  # the prefill and the step, at batch 4, prompt 16, cache 128
    assert first.compiled == ["the prefill of 4 x 16 into a cache of 128", "the step of 4 into a cache of 128"]
    for prompts in ([PROMPTS[1], PROMPTS[0], [3, 4]], PROMPTS[:3], [[7] * 14, [9], [1, 2, 3]]):
        assert not decoder.generate(prompts, greedy).compiled
    assert counter.frame_count == 2


def test_generating_leaves_a_compiled_training_step_as_it_was(llama):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(llama.config).train()
    counter = CompileCounter()
    train_step = torch.compile(lambda ids: model(input_ids=ids, labels=ids).loss, backend=counter)
    ids = torch.randint(3, 128, (2, 16))
    train_step(ids).backward()
    compiled = counter.frame_count
    Decoder(model, backend=CompileCounter()).generate(PROMPTS, Sampling(max_new_tokens=4, temperature=0))
    assert model.training and all(m.training for m in model.modules())
    train_step(ids).backward()
    assert counter.frame_count == compiled  # no recompile: generating changed no mode, setting or guard


def _gpt_eager(model, prompt, new):
    """runner's GPT, one token at a time over the whole window: what its decode must equal."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(new):
            logits = model(ids[:, -model.block_size:])[:, -1]
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids[0, len(prompt):].tolist()


@pytest.mark.parametrize("new", [10, 40], ids=["inside-the-window", "past-block-size"])
def test_runner_gpt_greedy_equals_its_whole_window_forward(new):
    from runner.models.gpt import GPT

    torch.manual_seed(0)
    model = GPT(vocab_size=128, n_layer=2, n_head=2, n_embd=32, block_size=32).eval()
    got = Decoder(model, compile=False).generate(PROMPTS, Sampling(max_new_tokens=new, temperature=0)).tokens
    assert got == [_gpt_eager(model, p, new) for p in PROMPTS]


@pytest.mark.parametrize("family", ["transformers", "gpt"])
def test_through_aot_autograd_the_cache_writes_give_the_eager_tokens(llama, family):
    # aot_eager functionalizes the in-place cache writes as Inductor does, without Inductor's minutes on a CPU.
    model = llama if family == "transformers" else _gpt()
    greedy = Sampling(max_new_tokens=12, temperature=0)
    eager = Decoder(model, compile=False).generate(PROMPTS, greedy).tokens
    assert Decoder(model, backend="aot_eager").generate(PROMPTS, greedy).tokens == eager
