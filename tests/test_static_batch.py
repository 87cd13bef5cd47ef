"""``StaticBatch``: the batch copied into static-address buffers that stand in for it exactly (the CUDA-graph
component's; the buffers work on any device type when told to, so these run on the CPU)."""

from __future__ import annotations

import gc
import weakref
from collections import UserDict, defaultdict, namedtuple
from dataclasses import dataclass

import torch

from runner.config.schema import CudaGraphMode, CudaGraphsConfig
from runner.stack.cudagraphs import CudaGraphs
from runner.stack.cudagraphs.static_batch import StaticBatch
from runner.torch_internals import runtime


def test_static_batch_keeps_one_buffer_per_shape_at_a_fixed_address() -> None:
    """The batch's device tensors land in buffers that never move (marked static), holding each new
    batch's values; a new shape gets its own buffers, up to the limit; other values pass as they are."""

    from runner.stack.cudagraphs.static_batch import StaticBatch

    Pair = namedtuple("Pair", "x y")
    static = StaticBatch("cpu", max_signatures=2)
    seen = []
    for step in range(3):
        batch = {"pair": Pair(torch.full((2, 8), step), torch.arange(16).view(2, 8) + step), "n": step}
        out = static(batch)
        assert type(out["pair"]) is Pair and out["n"] == step
        assert torch.equal(out["pair"].x, batch["pair"].x) and torch.equal(out["pair"].y, batch["pair"].y)
        assert out["pair"].x is not batch["pair"].x
        seen.append((out["pair"].x.data_ptr(), out["pair"].y.data_ptr()))
    assert len(set(seen)) == 1  # the same two buffers every step
    assert getattr(out["pair"].x, "_dynamo_static_input_type", None) == "unguarded"
    short = static((torch.ones(2, 4), torch.zeros(2, 4)))
    assert short[0].data_ptr() not in seen[0] and static.copies == 3 * 2 + 2
    third = (torch.ones(3, 4), torch.zeros(3, 4))
    assert static(third) is third and static.passed_through == 1  # past max_signatures: as it came

def test_the_shape_policys_marks_move_to_the_buffer_and_compile_one_graph() -> None:
    """The policy marks the batch before the buffers replace it: the marks must follow, or ``dynamic=dynamic``
    compiles each length anew (and under DDP the ranks' agreed dims are lost)."""
    static = StaticBatch("cpu")
    counts: list[int] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> torch.fx.GraphModule:
        counts.append(1)
        return gm

    f = torch.compile(lambda b: (b["x"] * 2).sum(dim=1), backend=backend)
    for length in (5, 7, 9):
        x = torch.randn(2, length)
        runtime.mark_dynamic(x, 1, min=2, max=None)
        out = static({"x": x})
        assert out["x"]._dynamo_dynamic_indices == {1}
        assert torch.equal(f(out), x.sum(dim=1) * 2)  # the same kernels (a graph run as traced); times 2 is exact
    assert len(counts) == 1  # one graph for every length, as the marks ask
    unmarked = static({"x": torch.randn(2, 5)})  # the length-5 buffer again: its old marks go
    assert not hasattr(unmarked["x"], "_dynamo_dynamic_indices")


def test_a_tensor_twice_in_the_batch_gets_one_buffer() -> None:
    static = StaticBatch("cpu")
    ids = torch.arange(8).view(2, 4)
    out = static({"input_ids": ids, "labels": ids})
    assert out["input_ids"] is out["labels"] and out["input_ids"] is not ids
    assert static.copies == 1 and len(static.buffers) == 1
    apart = static({"input_ids": ids, "labels": ids.clone()})  # not the same tensor: a signature of its own
    assert apart["input_ids"] is not apart["labels"] and len(static.signatures) == 2


class Encoding(UserDict):
    """Shaped like ``transformers.BatchEncoding``: a ``UserDict`` with attributes of its own."""

    def __init__(self, data: dict, n_sequences: int) -> None:
        super().__init__(data)
        self.n_sequences = n_sequences


class Tagged(dict):
    pass


@dataclass
class Pair:
    x: torch.Tensor
    note: str


def test_containers_keep_their_type_and_attributes() -> None:
    static = StaticBatch("cpu")
    x = torch.ones(2, 3)
    enc = static(Encoding({"input_ids": x}, n_sequences=1))
    assert type(enc) is Encoding and enc.n_sequences == 1 and enc["input_ids"] is not x
    assert torch.equal(enc["input_ids"], x)
    counts = defaultdict(list, {"x": x})
    out = static(counts)
    assert type(out) is defaultdict and out.default_factory is list and out["missing"] == []
    tagged = Tagged(x=x)
    tagged.origin = "loader"  # type: ignore[attr-defined]
    out_tagged = static(tagged)
    assert type(out_tagged) is Tagged and out_tagged.origin == "loader"
    pair = static(Pair(x, "p"))
    assert type(pair) is Pair and pair.note == "p" and pair.x is not x and torch.equal(pair.x, x)


def test_a_channels_last_or_transposed_input_keeps_its_layout() -> None:
    static = StaticBatch("cpu")
    image = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    out = static((image,))
    assert out[0].stride() == image.stride() and out[0].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out[0], image)
    plain = static((image.contiguous(),))  # same shape, other layout: its own buffer
    assert plain[0].is_contiguous() and plain[0].data_ptr() != out[0].data_ptr()
    t = torch.randn(4, 6).t()
    assert static((t,))[0].stride() == t.stride()


def test_the_buffers_are_freed_when_the_fit_ends() -> None:
    graphs = CudaGraphs(CudaGraphsConfig(mode=CudaGraphMode.reduce_overhead), torch.device("cuda"))
    graphs.batch = StaticBatch("cpu")
    graphs.configure()
    buffer = weakref.ref(graphs.prepare_batch((torch.ones(64, 64),))[0])
    gc.collect()
    assert buffer() is not None and graphs.batch.buffers
    graphs.teardown()
    gc.collect()
    assert buffer() is None and not graphs.batch.buffers and not graphs.batch.signatures
