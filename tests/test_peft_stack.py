"""A LoRA and a QLoRA Llama through the whole compile stack, in this process: every compile scope, every shape
policy over lengths that vary, the compiled optimizer over the adapter's parameters, checkpointing with adapter
dropout and bf16 saved activations. Each fit: no graph break, the graphs the policy promises (no recompile
after them), and the losses of the same LoRA model trained eagerly (Dynamo's ``eager`` backend runs eager's
ops; ``aot_eager`` where AOTAutograd is what is tested)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

from runner.config.schema import (
    AfterWarmup,
    DynamicConfig,
    OffloadConfig,
    OffloadStrategy,
    OptimizerPolicy,
    Scope,
    ShapePolicy,
)
from runner.config.schema.peft import PeftConfig, PeftMethod
from runner.peft import apply_peft
from runner.training.module import TrainModule
from tests import family_fits as ff

STEPS = 6
RTOL = 1e-5  # the same ops as eager (Dynamo's eager backend; aot_eager runs eager's ATen ops): reassociation only
BF16_RTOL = 2e-2  # activations saved in bfloat16
PROMISED = {ShapePolicy.automatic: 2, ShapePolicy.dynamic: 1, ShapePolicy.unbacked: 1, ShapePolicy.static: 1}
# Whole blocks of 64 values (QLoRA's NF4): 64 x 64, 128 x 64, 32 x 64.
LLAMA = {**ff.CAUSAL["llama"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2}


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ff.corpus(tmp_path_factory.mktemp("peft_stack"))


def module(method: PeftMethod = PeftMethod.lora, dropout: float = 0.0) -> TrainModule:
    from runner.models.hf import CausalLM

    torch.manual_seed(0)
    model = CausalLM(config="llama", overrides=LLAMA)
    apply_peft(model, PeftConfig(method=method, r=4, alpha=8, dropout=dropout))
    return TrainModule(model, optimizer=partial(torch.optim.AdamW, lr=1e-2))


def fit(text: Path, method: PeftMethod = PeftMethod.lora, dropout: float = 0.0,
        dynamic: DynamicConfig | None = None, **kwargs: object) -> ff.Fit:
    dynamic = dynamic or DynamicConfig(max=ff.SEQ_LEN)
    return ff.fit(module(method, dropout), ff.text_data(text, dynamic), dynamic=dynamic, steps=STEPS,
                  **kwargs)  # type: ignore[arg-type]


_eager: dict[PeftMethod, list[float]] = {}


def eager(text: Path, method: PeftMethod = PeftMethod.lora) -> list[float]:
    if method not in _eager:
        _eager[method] = fit(text, method, scope=Scope.none).losses
    return _eager[method]


def same(losses: list[float], reference: list[float], rtol: float = RTOL) -> None:
    assert len(losses) == len(reference) == STEPS
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(reference), rtol=rtol, atol=0)


@pytest.mark.parametrize("scope", [Scope.step, Scope.model, Scope.blocks, Scope.step_backward])
def test_every_scope_trains_the_adapter_as_eager_does_without_a_graph_break(scope: Scope, text: Path) -> None:
    result = fit(text, scope=scope)
    assert result.breaks == {} and len(set(result.lengths)) >= 3, (result.breaks, result.lengths)
    assert result.graphs <= PROMISED[ShapePolicy.automatic]
    same(result.losses, eager(text))


@pytest.mark.parametrize("policy", [ShapePolicy.dynamic, ShapePolicy.unbacked, ShapePolicy.static,
                                    ShapePolicy.bucket])
def test_every_shape_policy_keeps_its_promise_with_an_adapter(policy: ShapePolicy, text: Path) -> None:
    buckets = [24, 40, 64] if policy is ShapePolicy.bucket else []
    # After its promised graphs, a recompile fails the fit (dynamic.after_warmup=fail_on_recompile); a bucket's
    # graph is compiled when its first batch comes.
    after = AfterWarmup.none if policy is ShapePolicy.bucket else AfterWarmup.fail_on_recompile
    dynamic = DynamicConfig(policy=policy, max=ff.SEQ_LEN, buckets=buckets, after_warmup=after, warmup_steps=1)
    result = fit(text, dynamic=dynamic)
    assert result.breaks == {}
    expected = len(set(result.lengths)) if policy is ShapePolicy.bucket else PROMISED[policy]
    assert result.graphs == expected, (result.graphs, result.lengths)
    same(result.losses, eager(text))


def test_the_compiled_optimizer_steps_the_adapter_only(text: Path) -> None:
    result = fit(text, optimizer=OptimizerPolicy.compiled)
    assert result.figures["compile/optimizer"] == "compiled", result.figures.get("compile/optimizer_reason")
    # The one break is torch's own, by design, at the start of every optimizer's step (runner.telemetry.advice):
    # none in the training step.
    assert len(result.breaks) == 1 and "User-inserted graph break" in next(iter(result.breaks)), result.breaks
    same(result.losses, eager(text))


def test_checkpointing_with_adapter_dropout_and_bf16_saved_activations(text: Path) -> None:
    # One graph each (static shapes) and no measurement against none on a copy: AOTAutograd traces are the cost here.
    static = DynamicConfig(policy=ShapePolicy.static, max=ff.SEQ_LEN)
    checkpoint = OffloadConfig(strategy=OffloadStrategy.checkpoint, measure=False)
    checkpointed = fit(text, dropout=0.1, backend="aot_eager", dynamic=static, offload=checkpoint)
    assert checkpointed.breaks == {} and checkpointed.graphs == 1
    assert all(torch.isfinite(torch.tensor(checkpointed.losses)))
    bf16 = fit(text, backend="aot_eager", dynamic=static, offload=OffloadConfig(strategy=OffloadStrategy.bf16,
                                                                                    measure=False))
    assert bf16.breaks == {} and bf16.graphs == 1
    same(bf16.losses, eager(text), BF16_RTOL)


def test_qlora_compiles_its_registered_op_in_one_graph_as_eager_trains(text: Path) -> None:
    dynamic = DynamicConfig(policy=ShapePolicy.dynamic, max=ff.SEQ_LEN)
    result = fit(text, PeftMethod.qlora, dynamic=dynamic, backend="aot_eager")  # the op's fake and its backward
    assert result.breaks == {} and result.graphs == 1
    same(result.losses, eager(text, PeftMethod.qlora))
