"""Unit tests of the offload decisions and codecs (no compiling), and the torch internals pinned."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from runner.config.schema import OffloadConfig, OffloadStrategy
from runner.models.gpt import GPT, Block
from runner.stack.offload import build_offload, hooks, policy
from runner.stack.offload.component import apply_checkpointing
from runner.stack.offload.hooks import SavedTensorCodec
from runner.torch_internals import runtime


def tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(n_layer=2, n_embd=32, n_head=2, block_size=32)


# -- names ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("L['self'].model.blocks.0.attn.proj", "model.blocks.0.attn.proj"),
        ("L['self']._modules['model']._modules['head']", "model.head"),
        ("L['s'].model.blocks[1].mlp", "model.blocks.1.mlp"),
        ("L['self']._orig_mod.blocks.0._checkpoint_wrapped_module.ln1", "blocks.0.ln1"),
    ],
)
def test_normalize_source_path(source: str, expected: str) -> None:
    assert policy.normalize_source_path(source) == expected


def test_exclude_prefixes_select_modules_on_component_boundaries() -> None:
    model = GPT(n_layer=12, n_embd=32, n_head=2, block_size=32)
    names = policy.excluded_module_names(model, ["head", "blocks.1"])
    assert "head" in names and "blocks.1" in names and "blocks.1.attn.qkv" in names
    assert "blocks.10" not in names and "blocks.11.mlp" not in names
    assert policy.path_is_excluded("model.head", names)  # compiled root holds the model
    assert policy.path_is_excluded("blocks.1.mlp.fc", names)
    assert not policy.path_is_excluded("model.blocks.10.mlp", names)
    assert not policy.path_is_excluded("model.ln_f", names)


def test_wants_packing_leaves_integers_small_and_narrow_tensors_alone() -> None:
    big = torch.zeros(1024)
    assert policy.wants_packing(big, 4096, 2, 1024)
    assert not policy.wants_packing(big, 4096, 2, 8192)  # under min_bytes
    assert not policy.wants_packing(torch.zeros(1024, dtype=torch.int64), 8192, 2, 0)
    assert not policy.wants_packing(torch.zeros(1024, dtype=torch.bool), 1024, 2, 0)
    assert not policy.wants_packing(torch.zeros(1024, dtype=torch.bfloat16), 2048, 2, 0)
    assert policy.wants_packing(torch.zeros(1024, dtype=torch.bfloat16), 2048, 1, 0)  # fp8


def test_find_blocks_largest_module_list_or_class_names() -> None:
    model = tiny_gpt()
    assert [n for n, _ in policy.find_blocks(model)] == ["blocks.0", "blocks.1"]
    assert [n for n, _ in policy.find_blocks(model, ["Block"])] == ["blocks.0", "blocks.1"]
    assert [n for n, _ in policy.find_blocks(model, ["LayerNorm"])][-1] == "ln_f"
    assert policy.find_blocks(nn.Linear(2, 2)) == []


def test_checkpoint_wrapping_keeps_state_dict_keys_and_skips_excluded() -> None:
    model = tiny_gpt()
    keys = set(model.state_dict())
    wrapped = apply_checkpointing(model, exclude=frozenset({"blocks.1"}))
    assert wrapped == ["blocks.0"]
    assert not isinstance(model.blocks[0], Block) and isinstance(model.blocks[1], Block)
    assert set(model.state_dict()) == keys
    assert apply_checkpointing(model, exclude=frozenset({"blocks.1"})) == []  # idempotent


# -- codecs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(8, 16),
        lambda: torch.randn(16, 8).t(),  # transposed: dense, not contiguous
        lambda: torch.randn(4, 24)[:, 8:16],  # a slice of a fused projection: not dense
        lambda: torch.randn(2, 3, 4, 5).transpose(1, 2),
    ],
)
def test_codec_roundtrip_restores_dtype_size_and_stride(kind: str, make: object) -> None:
    x = make()  # type: ignore[operator]
    y = hooks.decode(hooks.encode(x, OffloadStrategy[kind].row.codec))
    assert y.dtype == x.dtype and y.shape == x.shape and y.stride() == x.stride()
    tol = 1e-2 if kind == "bf16" else 1e-1
    assert float((y - x).norm() / x.norm()) < tol
    z = hooks.decode(hooks.view_of(hooks.encode_storage(x, OffloadStrategy[kind].row.codec), x))
    assert z.shape == x.shape and z.stride() == x.stride() and z.storage_offset() == x.storage_offset()
    assert float((z - x).norm() / x.norm()) < tol  # fp8: the scale is the whole storage's


def test_fp8_scale_keeps_large_and_zero_tensors_finite() -> None:
    big = torch.randn(64) * 1e4
    assert torch.isfinite(hooks.decode(hooks.encode(big, OffloadStrategy.fp8.row.codec))).all()
    zero = torch.zeros(64)
    assert torch.equal(hooks.decode(hooks.encode(zero, OffloadStrategy.fp8.row.codec)), zero)


def test_codec_passes_integer_bool_and_parameters_through_untouched() -> None:
    codec = SavedTensorCodec(OffloadStrategy.fp8.row.codec, 0, ())
    codec.begin_step()
    for t in (torch.arange(4096), torch.ones(4096, dtype=torch.bool), torch.ones(4096, dtype=torch.int32)):
        assert codec.pack(t) is t
        assert codec.unpack(t) is t
    p = nn.Parameter(torch.randn(64, 64))
    assert codec.pack(p) is p
    view = p.t()  # what linear saves: a view of a parameter, alive anyway
    assert codec.pack(view) is view
    codec.end_step()


def test_build_offload_returns_the_component_for_each_strategy() -> None:
    cpu = torch.device("cpu")
    kinds = {s: type(build_offload(OffloadConfig(strategy=s), cpu)).__name__
             for s in OffloadStrategy if s is not OffloadStrategy.cpu}
    assert kinds == {OffloadStrategy.none: "OffloadComponent", OffloadStrategy.bf16: "HookOffload",
                     OffloadStrategy.fp8: "HookOffload", OffloadStrategy.checkpoint: "CheckpointOffload"}
    summary = build_offload(OffloadConfig(), cpu).figures()
    assert summary == {"offload/strategy": "none", "offload/active": False, "offload/path": "none"}


def test_memory_budget_is_configured_and_restored() -> None:
    before = runtime.memory_budget()
    comp = build_offload(OffloadConfig(strategy=OffloadStrategy.checkpoint, memory_budget=0.3), "cpu")
    comp.configure()
    assert runtime.memory_budget() == pytest.approx(0.3)
    model = tiny_gpt()
    comp.apply(model)  # the budget replaces per-block wrapping
    assert isinstance(model.blocks[0], Block)
    assert comp.figures()["offload/checkpoint_mode"] == "memory_budget"
    comp.teardown()
    assert runtime.memory_budget() == before
    assert comp.figures()["offload/memory_budget"] == pytest.approx(0.3)  # what the run compiled with


def test_held_storages_skip_freed_storage() -> None:
    # FSDP2 frees each gathered parameter's storage (0 bytes) between forward and backward; its
    # data pointer is then meaningless and must not be held.
    kept, freed = torch.ones(8), torch.ones(8)
    freed.untyped_storage().resize_(0)
    assert policy.held_storages([kept, freed]) == {kept.untyped_storage().data_ptr()}
