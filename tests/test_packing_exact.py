"""A packed batch computes what its examples compute alone: the loss of packed rows equals the loss of the same
examples padded one per row (fp32, 1e-4 relative), for runner's GPT and transformers' Llama family; and one
compiled graph serves packs whose example boundaries change, its inputs replaced by static buffers as the CUDA-graph
component replaces them (the capture logic, on the CPU; the CUDA graphs themselves in the ``gpu`` test)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from runner.data.sequences.packed import Examples, Packs, pack_collate
from runner.data.sequences.padding import PadCollate, PadTo
from runner.data.sequences.windows import Spans
from runner.models.gpt import GPT
from runner.models.hf import CausalLM
from runner.stack.cudagraphs.static_batch import StaticBatch
from runner.training.module import lm_loss

SEQ = 64
RTOL = 1e-4


def examples(seed: int, n: int = 12) -> Examples:
    """``n`` examples of 3..40 ids over a 256-id vocabulary, each answer the last third of its ids."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 41, n)
    ends = np.cumsum(lengths)
    ids = rng.integers(0, 256, int(ends[-1]))
    mask = np.zeros(len(ids), np.int8)
    for start, end in zip(ends - lengths, ends, strict=True):
        mask[end - max(1, (end - start) // 3):end] = 1
    return Examples(ids, Spans(ends - lengths, ends), mask, answers_only=True)


def packed_batch(ex: Examples, rows: int | None = None) -> Any:
    """The examples packed (the first ``rows`` packs, or all)."""
    packs = Packs(ex, SEQ, pad_id=0)
    assert len(packs) < len(ex)  # several examples share a row
    return pack_collate([packs[i] for i in range(rows or len(packs))])


def unpacked_batch(ex: Examples) -> Any:
    return PadCollate(PadTo(), pad_id=0)([ex[i] for i in range(len(ex))])


def gpt() -> nn.Module:
    torch.manual_seed(0)
    return GPT(vocab_size=256, n_layer=2, n_head=2, n_embd=32, block_size=SEQ)


def hf(config: str, attn: str = "sdpa") -> nn.Module:
    torch.manual_seed(0)
    return CausalLM(config, overrides={"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64,
                                       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                       "max_position_embeddings": SEQ}, attn_implementation=attn)


MODELS = {"gpt": gpt, "llama": lambda: hf("llama"), "llama-eager": lambda: hf("llama", "eager"),
          "qwen2": lambda: hf("qwen2"), "qwen3": lambda: hf("qwen3")}


@pytest.mark.parametrize("name", list(MODELS))
def test_the_packed_loss_equals_the_unpacked_loss(name: str) -> None:
    model = MODELS[name]().float().eval()
    ex = examples(seed=1)
    x, y = unpacked_batch(ex)
    inputs, targets = packed_batch(ex)
    assert int((targets != -100).sum()) == int((y != -100).sum())  # the same targets in the loss
    unpacked = lm_loss(model(x), y)
    unpacked.backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    packed = lm_loss(model(inputs), targets)
    packed.backward()
    torch.testing.assert_close(packed, unpacked, rtol=RTOL, atol=0)
    for a, b in zip((p.grad for p in model.parameters() if p.grad is not None), grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-6)  # sums over different groupings: fp32 rounding


def test_without_the_document_mask_the_packed_loss_differs() -> None:
    """The control: the same rows with plain causal attention (examples attending to the ones before them in
    the row) give another loss, so the equality above is the mask's doing."""
    model = gpt().eval()
    with torch.no_grad():  # larger weights than at initialisation: attention far from uniform, context matters
        for p in model.parameters():
            p.mul_(10)
    ex = examples(seed=1)
    inputs, targets = packed_batch(ex)
    x, y = unpacked_batch(ex)
    with torch.no_grad():
        masked, crossing = lm_loss(model(inputs), targets), lm_loss(model(inputs.input_ids), targets)
        unpacked = lm_loss(model(x), y)
    torch.testing.assert_close(masked, unpacked, rtol=RTOL, atol=0)
    assert abs(float(crossing) - float(unpacked)) > 100 * RTOL * float(unpacked)


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_one_compiled_graph_serves_every_pack_through_static_buffers(name: str) -> None:
    """Packs with different boundaries, copied into the same static buffers each step (what CUDA-graph replays
    read), through one compiled graph: eager's loss every step, no recompile."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = MODELS[name]().float().eval()
    step = torch.compile(lambda inputs, targets: lm_loss(model(inputs), targets), backend="aot_eager",
                         fullgraph=True, dynamic=False)
    static = StaticBatch("cpu")
    addresses = set()
    for seed in range(2, 7):
        batch = packed_batch(examples(seed), rows=2)  # one batch shape, other boundaries every step
        replaced = static(batch)
        addresses.add(replaced[0].document_ids.data_ptr())
        torch.testing.assert_close(step(*replaced), lm_loss(model(batch[0]), batch[1]), rtol=RTOL, atol=0)
    assert len(addresses) == 1 and static.copies >= 8
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gpt", "llama-flex"])
def test_cuda_graph_replays_with_changing_boundaries_equal_eager_on_gpu(name: str) -> None:
    """The wrong answers seen elsewhere (stale document offsets replayed by a CUDA graph): here each replay reads
    the new pack's document ids from the static buffer, and its loss and gradients equal eager's (FlexAttention
    inside the graph, SDPA with the dense mask outside it)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = (gpt() if name == "gpt" else hf("llama", "flex_attention")).cuda().float()
    reference = (gpt() if name == "gpt" else hf("llama", "sdpa")).cuda().float()  # eager: SDPA, the dense mask
    reference.load_state_dict(model.state_dict())
    step = torch.compile(lambda inputs, targets: lm_loss(model(inputs), targets), mode="reduce-overhead",
                         fullgraph=True, dynamic=False)
    static = StaticBatch("cuda")
    checked = 0
    for seed in range(2, 12):
        inputs, targets = packed_batch(examples(seed), rows=2)
        batch = static((inputs.__class__(*(t.cuda() for t in (inputs.input_ids, inputs.position_ids,
                                                                inputs.document_ids))), targets.cuda()))
        torch.compiler.cudagraph_mark_step_begin()
        got = step(*batch)
        got.backward()
        want = lm_loss(reference(batch[0]), batch[1])
        want.backward()
        torch.testing.assert_close(got.detach().clone(), want.detach(), rtol=1e-3, atol=1e-4)
        for a, b in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-2, atol=1e-4)
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        checked += 1
    assert checked >= 4 and counters["inductor"]["cudagraph_skips"] == 0
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()
