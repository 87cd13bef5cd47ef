"""Dynamic-shape policies: decisions without compiling, then real fits (Dynamo ``eager`` backend) on
per-document text whose lengths vary, counting graphs as Dynamo does."""

from __future__ import annotations

import random
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from runner.config.schema import AfterWarmup, CompileConfig, DynamicConfig, OptimizerPolicy, Scope, ShapePolicy
from runner.data.sequences.padding import IGNORE_INDEX, PadCollate, PadTo
from runner.data.text import TextDataModule
from runner.models.gpt import GPT
from runner.stack.dynamic import (
    Agreement,
    RecompileAfterWarmupError,
    ShapeAgreement,
    resolve_agreement,
    resolve_dynamic_arg,
    resolve_pad_to,
)
from runner.stack.dynamic.policy import targets_of
from runner.strategy import CompileStrategy
from runner.training.module import TrainModule, lm_loss
from tests.helpers import LossRecorder

SEQ_LEN = 64
BUCKETS = [24, 40, 64]


# -- decisions ---------------------------------------------------------------------------------------
def test_dynamic_arg_and_padding_per_policy() -> None:
    assert resolve_dynamic_arg(ShapePolicy.static) is False
    assert resolve_dynamic_arg(ShapePolicy.bucket) is False
    for p in (ShapePolicy.automatic, ShapePolicy.dynamic, ShapePolicy.unbacked):
        assert resolve_dynamic_arg(p) is None
    assert resolve_pad_to(DynamicConfig(policy=ShapePolicy.static), 64)(10) == 64
    assert resolve_pad_to(DynamicConfig(policy=ShapePolicy.bucket, buckets=[64, 16, 32]), 64)(17) == 32
    assert resolve_pad_to(DynamicConfig(policy=ShapePolicy.dynamic), 64)(17) == 17


@pytest.mark.parametrize(
    ("policy", "world", "expected"),
    [
        (ShapePolicy.automatic, 1, Agreement.local),
        (ShapePolicy.static, 2, Agreement.local),
        (ShapePolicy.bucket, 2, Agreement.local),
        (ShapePolicy.automatic, 2, Agreement.runner),
        (ShapePolicy.dynamic, 2, Agreement.runner),
        # On NCCL too: torch's guard collectives would cost two all-gathers and a device sync per compiled-frame
        # entry (runner.stack.dynamic.agreement); runner's exchange is one gloo all-gather per step.
        (ShapePolicy.unbacked, 4, Agreement.runner),
    ],
)
def test_agreement_choice(policy: ShapePolicy, world: int, expected: Agreement) -> None:
    assert resolve_agreement(policy, world) is expected


def test_agreement_disabled_is_local() -> None:
    assert resolve_agreement(ShapePolicy.automatic, 2, enabled=False) is Agreement.local


def test_shape_agreement_marks_a_dim_dynamic_on_every_rank_once_any_rank_changes() -> None:
    a = ShapeAgreement()
    same = [(2, 24), (2, 24)]
    assert a.decide([same, same]) == set()  # step 0: both ranks at 24, static
    assert a.decide([same, same]) == set()
    assert a.decide([same, [(2, 31), (2, 31)]]) == {(0, 1), (1, 1)}  # rank 1 changed: dynamic everywhere
    assert a.decide([same, same]) == {(0, 1), (1, 1)}  # and stays dynamic
    b = ShapeAgreement()
    assert b.decide([[(2, 24)], [(2, 30)]]) == {(0, 1)}  # ranks differ at the first step: dynamic at once
    with pytest.raises(RuntimeError, match="batch structure"):
        b.decide([[(2, 24)], [(2, 24), (2,)]])


def test_targets_of_finds_integer_targets_only() -> None:
    x, y = torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)
    assert targets_of((x, y)) is y
    assert targets_of((x, y.float())) is None
    assert targets_of(x) is None
    assert targets_of((x, y[:, 0])) is None  # one class label per sample: no sequence to pad


# -- padding is invisible to the loss ----------------------------------------------------------------
def test_padded_loss_and_grads_equal_unpadded() -> None:
    torch.manual_seed(0)
    model = GPT(n_layer=2, n_embd=32, n_head=2, block_size=SEQ_LEN)
    docs = [torch.randint(0, 256, (n + 1,), dtype=torch.uint8) for n in (9, 30, 17)]
    x, y = PadCollate(PadTo((SEQ_LEN,)))(docs)
    assert (y[0, 9:] == IGNORE_INDEX).all() and (x[0, 9:] == 0).all()
    padded = lm_loss(model(x), y)
    grads_padded = torch.autograd.grad(padded, list(model.parameters()))
    # Unpadded: each document on its own, token-weighted mean over every real target.
    per_doc = [F.cross_entropy(model(d[:-1].long()[None])[0], d[1:].long(), reduction="sum") for d in docs]
    total = torch.stack(per_doc).sum()
    unpadded = total / sum(len(d) - 1 for d in docs)
    grads_unpadded = torch.autograd.grad(unpadded, list(model.parameters()))
    torch.testing.assert_close(padded, unpadded, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads_padded, grads_unpadded, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


# -- real fits -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Paragraphs of widely varying length (17-64 bytes): per-document batches of 2 vary in length."""
    rng = random.Random(0)
    words = ["def", "class", "return", "import", "self", "value", "for", "in", "if", "else", "while", "yield"]
    paras = []
    for _ in range(400):
        n = rng.randint(18, SEQ_LEN + 1)
        text = " ".join(rng.choice(words) for _ in range(40))[:n]
        paras.append(text.replace("\n", " "))
    path = tmp_path_factory.mktemp("corpus") / "paragraphs.txt"
    path.write_text("\n\n".join(paras))
    return path


def fit(corpus: Path, dynamic: DynamicConfig, steps: int = 10, backend: str = "eager",
        optimizer: OptimizerPolicy = OptimizerPolicy.none, val_batches: int = 0,
        ) -> tuple[list[float], dict[str, Any], list[int]]:
    """Train a tiny GPT on per-document batches; return losses, the stack summary and batch lengths."""
    torch._dynamo.reset()  # a second fit in one test would reuse the first one's graphs
    torch.manual_seed(0)
    module = TrainModule(GPT(n_layer=2, n_embd=32, n_head=2, block_size=SEQ_LEN),
                         optimizer=partial(torch.optim.AdamW, lr=3e-3))
    data = TextDataModule(path=str(corpus), batching="documents", seq_len=SEQ_LEN, batch_size=2,
                          pad_to=resolve_pad_to(dynamic, SEQ_LEN))
    lengths: list[int] = []

    class Lengths(LossRecorder):
        def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                                 batch_idx: int) -> None:
            lengths.append(batch[0].shape[1])

    rec = Lengths()
    strategy = CompileStrategy(compile=CompileConfig(scope=Scope.step, backend=backend, optimizer=optimizer),
                               dynamic=dynamic, device="cpu")
    trainer = L.Trainer(accelerator="cpu", strategy=strategy, max_steps=steps, logger=False,
                        limit_val_batches=val_batches, val_check_interval=max(1, steps // 2),
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[rec])
    trainer.fit(module, data)
    return rec.losses, strategy.stack.figures(), lengths


@pytest.mark.parametrize(("policy", "max_graphs"),
                         [(ShapePolicy.automatic, 2), (ShapePolicy.dynamic, 1), (ShapePolicy.unbacked, 1)])
def test_dynamic_policies_compile_at_most_twice_whatever_the_lengths(corpus: Path, policy: ShapePolicy,
                                                                      max_graphs: int) -> None:
    from torch._dynamo.utils import counters

    losses, s, lengths = fit(corpus, DynamicConfig(policy=policy, max=SEQ_LEN))
    assert len(set(lengths)) >= 5, lengths  # the data really varies
    assert s["dynamic/graphs"] == counters["stats"]["unique_graphs"] <= max_graphs
    assert s["dynamic/recompiles"] == s["dynamic/graphs"] - 1
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])  # unbacked: no SDPA break
    assert 0 < s["dynamic/padding_waste_pct"] < 50


def test_bucket_compiles_once_per_bucket_and_static_once(corpus: Path) -> None:
    _, s, lengths = fit(corpus, DynamicConfig(policy=ShapePolicy.bucket, buckets=BUCKETS), steps=12)
    assert set(lengths) <= set(BUCKETS)
    assert s["dynamic/graphs"] == len(set(lengths)) <= len(BUCKETS)
    _, static, lengths = fit(corpus, DynamicConfig(policy=ShapePolicy.static), steps=6)
    assert set(lengths) == {SEQ_LEN} and static["dynamic/graphs"] == 1
    assert static["dynamic/padding_waste_pct"] > s["dynamic/padding_waste_pct"]


def test_padding_policy_does_not_change_training(corpus: Path) -> None:
    """Same batches padded to the batch's longest (dynamic) or to seq_len (static): same losses."""
    dynamic, _, _ = fit(corpus, DynamicConfig(policy=ShapePolicy.dynamic), steps=6)
    static, _, _ = fit(corpus, DynamicConfig(policy=ShapePolicy.static), steps=6)
    torch.testing.assert_close(torch.tensor(dynamic), torch.tensor(static), rtol=1e-4, atol=0)


def test_fail_on_recompile_names_the_guard(corpus: Path) -> None:
    cfg = DynamicConfig(policy=ShapePolicy.automatic, after_warmup=AfterWarmup.fail_on_recompile, warmup_steps=1)
    with pytest.raises(RecompileAfterWarmupError) as info:
        fit(corpus, cfg, steps=10)
    msg = str(info.value)
    assert "size mismatch at index 1" in msg and "expected" in msg  # torch's guard, e.g. tensor 'batch[0]'
    assert "training step 1" in msg and "dynamic.policy=dynamic" in msg


def test_strict_dynamic_never_recompiles_after_warmup(corpus: Path) -> None:
    cfg = DynamicConfig(policy=ShapePolicy.dynamic, after_warmup=AfterWarmup.fail_on_recompile, warmup_steps=1)
    losses, s, lengths = fit(corpus, cfg, steps=8)
    assert len(losses) == 8 and len(set(lengths[1:])) > 1 and s["dynamic/graphs"] == 1


def test_eager_on_recompile_runs_new_shapes_eagerly(corpus: Path) -> None:
    cfg = DynamicConfig(policy=ShapePolicy.automatic, after_warmup=AfterWarmup.eager_on_recompile, warmup_steps=1)
    losses, s, lengths = fit(corpus, cfg, steps=6)
    assert len(losses) == 6 and len(set(lengths)) > 1
    assert s["dynamic/graphs"] == 1  # nothing compiled after warm-up


def test_dynamo_flags_are_set_each_run_and_restored() -> None:
    import torch._dynamo.config as dc

    from runner.stack import StepMode
    from runner.stack.dynamic import build_shape_policy

    before = (dc.recompile_limit, dc.specialize_float, dc.automatic_dynamic_shapes)
    policy = build_shape_policy(DynamicConfig(policy=ShapePolicy.bucket, recompile_limit=5, specialize_float=False),
                                StepMode())
    policy.configure()
    assert (dc.recompile_limit, dc.specialize_float, dc.automatic_dynamic_shapes) == (5, False, False)
    assert dc.enable_compiler_collectives is False
    policy.teardown()
    assert (dc.recompile_limit, dc.specialize_float, dc.automatic_dynamic_shapes) == before
    assert torch.compiler.set_enable_guard_collectives(False) is False  # returns the previous setting


def test_policy_figures_count_the_training_step_frame_only(corpus: Path) -> None:
    """A compiled optimizer step and validation compile too; the shape policy's figures are about the
    training step's frame (compiles that started inside a training step)."""
    _, s, _ = fit(corpus, DynamicConfig(policy=ShapePolicy.dynamic), steps=4, optimizer=OptimizerPolicy.compiled,
                  val_batches=1)
    assert s["dynamic/frame_compiles"] == 1 and s["dynamic/recompiles"] == 0
    assert s["dynamic/graphs"] == 1


# -- config ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["static", "bucket", "automatic", "dynamic", "unbacked", "strict"])
def test_dynamic_options_compose_with_documents(option: str, tmp_path: Path) -> None:
    from runner.config import compose, load

    cfg = load(compose([f"dynamic={option}", "data=text_documents"], run_dir=str(tmp_path)))
    assert cfg.dynamic.policy is ShapePolicy(option if option != "strict" else "dynamic")


def test_recipe_is_strict_dynamic_on_documents(tmp_path: Path) -> None:
    from runner.config import compose, load

    cfg = load(compose(["+recipe=dynamic_documents"], run_dir=str(tmp_path)))
    assert cfg.dynamic.policy is ShapePolicy.dynamic and cfg.dynamic.after_warmup is AfterWarmup.fail_on_recompile
    assert cfg.data.batching.value == "documents"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["dynamic=bucket", "dynamic.recompile_limit=2"], "recompile_limit"),
        (["dynamic=bucket", "dynamic.buckets=[100,300]", "data.seq_len=256"], "block_size"),
        (["dynamic=dynamic", "dynamic.max=100", "data.seq_len=256"], "dynamic.max=100"),
        (["dynamic=dynamic", "dynamic.dims=[]"], "dims"),
        (["dynamic=unbacked", "dynamic.min=0"], "falls back to eager"),
        (["dynamic=strict", "dynamic.warmup_steps=0"], "warmup_steps"),
    ],
)
def test_impossible_dynamic_combinations_are_refused(overrides: list[str], expected: str, tmp_path: Path) -> None:
    from runner.config import ConfigError, compose, load

    with pytest.raises(ConfigError, match=expected):
        load(compose(["data=text_documents", *overrides], run_dir=str(tmp_path)))


@pytest.mark.parametrize(("option", "padded"), [("static", 256), ("bucket", 64), ("dynamic", 37)])
def test_built_datamodule_pads_as_the_policy_says(option: str, padded: int, tmp_path: Path) -> None:
    from runner.build import build_datamodule
    from runner.config import compose, load

    cfg = load(compose([f"dynamic={option}", "data=text_documents", "data.seq_len=256"], run_dir=str(tmp_path)))
    dm = build_datamodule(cfg)
    # The rule survived hydra's instantiate (a dataclass argument would have become a DictConfig).
    assert isinstance(dm, TextDataModule) and isinstance(dm.pad_to, PadTo)
    x, y = PadCollate(dm.pad_to)([torch.arange(38, dtype=torch.uint8)])
    assert x.shape == y.shape == (1, padded)


def test_unset_max_becomes_the_datas_longest_batch(tmp_path: Path) -> None:
    """mark_dynamic ranges are strict; an unbounded one breaks on the first size the compiler guards."""
    from runner.build import build_strategy
    from runner.config import compose, load
    from runner.stack.dynamic import resolve_bounds

    assert resolve_bounds(DynamicConfig(policy=ShapePolicy.dynamic), 256).max == 256
    assert resolve_bounds(DynamicConfig(policy=ShapePolicy.dynamic, max=100), 256).max == 100
    assert resolve_bounds(DynamicConfig(policy=ShapePolicy.automatic), 256).max is None  # nothing is marked
    cfg = load(compose(["dynamic=strict", "data=text_documents", "data.seq_len=128"], run_dir=str(tmp_path)))
    assert cfg.dynamic.max is None and build_strategy(cfg).stack.settings.dynamic.max == 128


@pytest.mark.parametrize(("data", "collectives"), [("text", False), ("text_documents", True), ("synthetic", False)])
def test_ranks_agree_on_shapes_only_when_shapes_can_vary(data: str, collectives: bool, tmp_path: Path) -> None:
    """Fixed-shape data needs no cross-rank agreement (a host all-gather of the batch shapes every step)."""
    from runner.build import build_strategy
    from runner.config import compose, load

    overrides = ["+recipe=smoke", f"data={data}", "trainer.devices=2"]
    if data == "synthetic":
        overrides = ["+recipe=smoke_mlp", "trainer.devices=2"]
    cfg = load(compose(overrides, run_dir=str(tmp_path)))
    strategy = build_strategy(cfg)
    assert strategy.stack.settings.dynamic.compiler_collectives is collectives
    enabled = strategy.stack.settings.dynamic.compiler_collectives
    agreement = resolve_agreement(cfg.dynamic.policy, 2, enabled)
    assert (agreement is not Agreement.local) is collectives
