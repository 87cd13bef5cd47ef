"""``peft=lora`` and ``peft=qlora`` without training: runner's layer and QLoRA's registered op, which modules it
adapts in each kind of model, the config checks' shapes, a run started from a saved adapter, and the bad inputs
refused (one paragraph, exit code 2, nothing written). The runs end to end: ``tests/test_peft_runs.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from runner.config.decisions.peft import adapted_shapes, resolve_plan
from runner.config.schema.peft import PeftConfig, PeftMethod
from runner.peft import LoRALinear, apply_peft
from runner.peft.layer import LoRAConv1D
from runner.peft.nf4 import QLoRALinear

LAYERS, PER_LAYER = 2, 7  # a tiny Llama: 2 layers of q, k, v, o, gate, up and down
SEED = 5
FLOAT_STEPS = 8  # a tolerance for two computations of the same outputs in another order: float32 eps per op


def ids() -> torch.Tensor:
    return torch.randint(1, 256, (2, 16), generator=torch.Generator().manual_seed(SEED))


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal up to float32 rounding in another order of the same operations."""
    scale = float(b.detach().abs().max())
    torch.testing.assert_close(a, b, rtol=0, atol=FLOAT_STEPS * torch.finfo(torch.float32).eps * max(scale, 1.0))


# -- the layer --------------------------------------------------------------------------------------------------
def test_the_layer_starts_as_its_base_and_adds_scale_times_b_a() -> None:
    torch.manual_seed(0)
    base = nn.Linear(16, 24)
    layer = LoRALinear(base, r=4, alpha=8, dropout=0.0)
    x = torch.randn(3, 16)
    assert torch.equal(layer(x), base(x))  # lora_B starts at zero
    with torch.no_grad():
        layer.lora_B.weight.normal_()
    expected = base(x) + 2.0 * (x @ layer.lora_A.weight.T @ layer.lora_B.weight.T)
    close(layer(x), expected)
    close(layer.merged()(x), layer(x))
    assert isinstance(layer.dropout, nn.Identity)  # p=0 runs no dropout op
    assert isinstance(LoRALinear(nn.Linear(4, 4), 2, 2, 0.1).dropout, nn.Dropout)
    assert layer.weight is base.weight and not layer.weight.requires_grad  # the base's own tensor, frozen
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16-mixed: bf16 out, as the base linear's
        assert layer(x).dtype == base(x).dtype == torch.bfloat16


def test_the_compiled_layer_is_one_graph_that_guards_on_nothing_changing() -> None:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    layer = LoRALinear(nn.Linear(16, 16), r=4, alpha=8, dropout=0.1)
    step = torch.compile(layer, backend="eager", fullgraph=True)
    for _ in range(3):
        step(torch.randn(2, 5, 16)).sum().backward()
    layer.eval()  # dropout off: a different graph is expected for eval, once
    step(torch.randn(2, 5, 16))
    assert counters["stats"]["unique_graphs"] == 2 and not counters["graph_break"]


def test_qlora_runs_its_nf4_weight_through_the_registered_op_in_the_graph() -> None:
    torch.manual_seed(0)
    base = nn.Linear(128, 64)
    layer = QLoRALinear(base, r=4, alpha=8, dropout=0.0)
    assert not hasattr(layer, "weight") and layer.weight_codes.dtype == torch.uint8
    assert layer.weight_codes.numel() == 128 * 64 // 2  # 4 bits a value
    error = (layer.base_weight() - base.weight).abs().max()
    assert 0 < error < 0.25 * base.weight.abs().max()  # NF4 rounds, within a block's step
    graphs: list[torch.fx.GraphModule] = []

    def record(gm: torch.fx.GraphModule, inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    x = torch.randn(3, 128, requires_grad=True)
    out = torch.compile(layer, backend=record, fullgraph=True)(x)
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert "runner.nf4_linear" in targets, targets  # the op itself: no subclass, no Python in the graph
    close(out, nn.functional.linear(x, layer.base_weight(), base.bias))
    out.sum().backward()  # the op's backward: grad @ W, W dequantized again
    close(x.grad, torch.ones(3, 64) @ layer.base_weight())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16-mixed: the base matmul in bf16, as nn.Linear's
        assert layer(x).dtype == base(x).dtype == torch.bfloat16


# -- which modules, in each kind of model ---------------------------------------------------------------------
def _adapt(model: nn.Module, **kwargs: Any) -> tuple[list[str], list[str]]:
    adapter = apply_peft(model, PeftConfig(method=PeftMethod.lora, r=2, alpha=4, **kwargs))
    assert adapter is not None
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    return list(adapter.plan.targets), trainable


def test_a_causal_lm_adapts_every_linear_of_attention_and_mlp_but_not_its_head() -> None:
    from runner.models.hf import CausalLM

    model = CausalLM(config="llama", overrides={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                                "num_attention_heads": 2, "vocab_size": 256})
    x = ids()
    before = model(x)
    targets, trainable = _adapt(model)
    assert len(targets) == LAYERS * PER_LAYER and not any("lm_head" in t for t in targets)
    assert all(".lora_" in n for n in trainable) and len(trainable) == 2 * len(targets)
    assert torch.equal(model(x), before)  # lora_B is zero: the adapted model starts as the base


def test_a_classifier_trains_its_head_in_full_beside_the_adapter() -> None:
    from runner.models.hf import SequenceClassifier

    model = SequenceClassifier(config="bert", overrides={"hidden_size": 32, "intermediate_size": 64, "vocab_size": 100,
                                                         "num_hidden_layers": 1, "num_attention_heads": 2},
                               num_labels=3)
    targets, trainable = _adapt(model)
    assert "classifier" not in targets and {"model.classifier.weight", "model.classifier.bias"} <= set(trainable)
    assert set(trainable) - {"model.classifier.weight", "model.classifier.bias"} == \
        {f"model.{t}.lora_{p}.weight" for t in targets for p in "AB"}


def test_runner_gpt_and_gpt2s_conv1d_and_a_users_module_by_module_path() -> None:
    from runner.models.gpt import GPT
    from runner.models.hf import CausalLM

    gpt_targets, _ = _adapt(GPT(n_layer=2, n_embd=32, n_head=2, block_size=16))
    assert sorted(gpt_targets) == sorted(f"blocks.{i}.{m}" for i in range(2)
                                         for m in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"))  # tied head left
    gpt2 = CausalLM(config="gpt2", overrides={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                                              "vocab_size": 256, "intermediate_size": None})
    targets, _ = _adapt(gpt2)
    assert {type(gpt2.model.get_submodule(t)) for t in targets} == {LoRAConv1D} and len(targets) == 4
    own = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    targets, trainable = _adapt(own, target_modules=["2"])
    assert targets == ["2"] and trainable == ["2.lora_A.weight", "2.lora_B.weight"]


def test_the_config_checks_shapes_are_the_adapted_models() -> None:
    from runner.models.hf import CausalLM

    for method in (PeftMethod.lora, PeftMethod.qlora):
        peft = PeftConfig(method=method, r=4)
        model = CausalLM(config="llama", overrides={"hidden_size": 64, "intermediate_size": 128, "vocab_size": 256,
                                                    "num_hidden_layers": 1, "num_attention_heads": 2})
        expected = adapted_shapes(model, resolve_plan(model, peft), peft)
        apply_peft(model, peft)
        assert expected == {k: tuple(v.shape) for k, v in model.state_dict().items()}, method


# -- bad input: one paragraph, exit code 2, nothing written ---------------------------------------------------------
TINY = ["+recipe=llama_lora", "data.max_bytes=20000", "model.overrides.hidden_size=32",
        "model.overrides.intermediate_size=64", "model.overrides.num_hidden_layers=1",
        "model.overrides.num_attention_heads=2"]


def refused(tmp_path: Path, *overrides: str) -> str:
    """Run ``python -m runner`` (in this process) and return its one-paragraph refusal; nothing may be written."""
    from tests.cli import run_cli

    out = run_cli(*overrides, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []  # no outputs/, no run directory
    message = out.stderr.strip().splitlines()[-1]
    assert message.startswith("runner: "), out.stderr[-2000:]
    return message


def test_a_target_pattern_that_matches_nothing_is_refused_with_the_models_linears(tmp_path: Path) -> None:
    message = refused(tmp_path, *TINY, "peft.target_modules=[q_prj]")
    for fragment in ("peft.target_modules: 'q_prj' matches no module", "model.layers.N.self_attn.q_proj",
                     "model.layers.N.mlp.down_proj", "leave peft.target_modules empty"):
        assert fragment in message, message


def test_a_rank_below_one_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, *TINY, "peft.r=0")
    assert "peft.r=0" in message and "positive integer" in message and "peft.r=16" in message


def test_lora_on_a_model_without_a_linear_layer_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, "peft=lora", "model=custom", "model._target_=torch.nn.Embedding",
                      "+model.num_embeddings=256", "+model.embedding_dim=8")
    assert "peft=lora on Embedding, which has no nn.Linear" in message and "peft=none" in message, message


def test_a_saved_adapter_of_another_shape_is_refused_naming_the_module_and_both_shapes(tmp_path: Path) -> None:
    from runner.models.hf import CausalLM
    from runner.peft.files import write_adapter

    model = CausalLM(config="llama", overrides={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                                "num_attention_heads": 2, "vocab_size": 256,
                                                "max_position_embeddings": 128})
    adapter = apply_peft(model, PeftConfig(method=PeftMethod.lora, r=2))
    assert adapter is not None
    saved = tmp_path.parent / f"{tmp_path.name}_adapter"
    saved.mkdir()
    write_adapter(adapter, saved, None)
    message = refused(tmp_path, *TINY, "peft.r=4", f"peft.path={saved}")
    assert "does not fit this model" in message and "14 of its weights differ" in message, message
    assert "model.layers.N.self_attn.q_proj (N = 0): lora_A [2, 32], lora_B [32, 2] in the adapter; [4, 32], " \
           "[32, 4] here" in message, message


def test_a_saved_model_gets_every_adapter_check_before_anything_is_written(tmp_path: Path) -> None:
    """A model of one's own (``model.path``, saved with save_pretrained) is built on the meta device from its
    config.json for the checks, as a configured model is: a target that matches nothing and an adapter trained on
    another base (hidden 32 against 64) are refused, each mismatched module named with both shapes."""
    from runner.models.hf import CausalLM
    from runner.peft.files import write_adapter
    from tests.own_llm import alpaca_array, own_llm

    own, other = own_llm(tmp_path.parent / "own", hidden_size=64), own_llm(tmp_path.parent / "other", hidden_size=32)
    data = alpaca_array(tmp_path.parent / "alpaca.json")
    adapter = apply_peft(CausalLM(path=str(other)), PeftConfig(method=PeftMethod.lora, r=4))
    assert adapter is not None
    (tmp_path.parent / "adapter").mkdir()
    write_adapter(adapter, tmp_path.parent / "adapter", str(other))
    run = ["model=hf_causal_lm", f"model.path={own}", "data=instruct", f"data.path={data}", "peft=lora", "peft.r=4"]
    message = refused(tmp_path, *run, "peft.target_modules=[nonexistent_proj]")
    assert "peft.target_modules: 'nonexistent_proj' matches no module" in message, message
    assert "model.layers.N.mlp.down_proj (x2)" in message, message
    message = refused(tmp_path, *run, f"peft.path={tmp_path.parent / 'adapter'}")
    assert f"does not fit this model (trained on {other}" in message and "28 of its weights differ" in message
    for module, shapes in {"self_attn.q_proj": "lora_A [4, 32], lora_B [32, 4] in the adapter; [4, 64], [64, 4]",
                           "mlp.down_proj": "lora_A [4, 64], lora_B [32, 4] in the adapter; [4, 128], [64, 4]"}.items():
        assert f"model.layers.N.{module} (N = 0, 1): {shapes} here" in message, message


def test_qlora_where_nf4_cannot_run_is_refused_with_the_reason(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from runner.torch_internals import nf4

    assert nf4.nf4_problem("meta") is not None  # a device NF4 cannot run on names why
    # torchao absent, as in an environment without it: hidden from the import system for this test only.
    for name in [m for m in sys.modules if m == "torchao" or m.startswith("torchao.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torchao", None)
    nf4.nf4_module.cache_clear()
    nf4.nf4_problem.cache_clear()
    try:
        message = refused(tmp_path, *TINY, "peft=qlora")
    finally:
        nf4.nf4_module.cache_clear()
        nf4.nf4_problem.cache_clear()
    assert "peft=qlora stores the frozen base weights in 4-bit NF4 through torchao" in message, message
    assert "torchao does not import" in message and "peft=lora" in message, message


def test_other_peft_settings_that_name_nothing_are_refused(tmp_path: Path) -> None:
    from runner.config import ConfigError
    from runner.config.composing.precheck import precheck

    cases = {"peft.target_modules=[input_layernorm]": "which is not a linear layer",
             "peft.modules_to_save=[classifier]": "peft.modules_to_save: 'classifier' matches no module",
             "peft.dropout=1.0": "peft.dropout=1.0", "peft.alpha=0": "peft.alpha=0",
             "peft.path=/nonexistent": "peft.path=/nonexistent does not exist"}
    for override, fragment in cases.items():
        with pytest.raises(ConfigError) as info:
            precheck([*TINY, override])
        assert fragment in str(info.value), (override, str(info.value))


def test_merge_is_refused_for_a_run_without_an_adapter() -> None:
    from runner.after.adapter_export import merge_error
    from runner.config.schema import RunConfig

    cfg = RunConfig()
    assert "no adapter to merge" in (merge_error(cfg, Path("RUN"), merge=True, dequantize=False) or "")
    assert "--dequantize goes with --merge" in (merge_error(cfg, Path("RUN"), merge=False, dequantize=True) or "")
    cfg.peft.method = PeftMethod.lora
    assert merge_error(cfg, Path("RUN"), merge=True, dequantize=False) is None


def test_a_run_starts_from_a_saved_adapter(tmp_path: Path) -> None:
    """``peft.path``: the adapter's weights (and a module trained in full) copied into the new run's layers."""
    from runner.models.gpt import GPT
    from runner.peft.files import write_adapter

    def gpt() -> nn.Module:
        torch.manual_seed(0)
        return GPT(n_layer=1, n_embd=32, n_head=2, block_size=16)

    first = gpt()
    adapter = apply_peft(first, PeftConfig(method=PeftMethod.lora, r=2, modules_to_save=["ln_f"]))
    assert adapter is not None
    with torch.no_grad():
        for p in first.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p))
    write_adapter(adapter, tmp_path, None)
    second = gpt()
    apply_peft(second, PeftConfig(method=PeftMethod.lora, r=2, modules_to_save=["ln_f"], path=str(tmp_path)))
    x = ids() % 256
    assert torch.equal(second(x), first(x))


def test_qlora_targets_that_do_not_fill_whole_nf4_blocks_are_refused_by_the_plan_itself() -> None:
    """One decision for the check and the injection: the plan refuses a weight of 15 values under QLoRA."""
    from runner.config.decisions.peft import PeftTargetError

    model = nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 64))
    with pytest.raises(PeftTargetError, match=r"peft=qlora: 0's weight \[5, 3\] does not fill whole NF4 blocks"):
        resolve_plan(model, PeftConfig(method=PeftMethod.qlora))
    assert resolve_plan(model, PeftConfig(method=PeftMethod.lora)).targets == ("0", "1")
