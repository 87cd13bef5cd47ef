"""The chunked loss (``loss.chunked``, ``runner.losses``): the loss and its gradients equal the whole logits' with
``-100`` targets in every chunk, a chunk of nothing but ``-100`` and packed rows; out-of-range targets raise,
compiled too; the models' hidden states and output layers; the decision and its refusals; no extra graph break or
recompile through the compile stack; ``runner eval`` and ``generate`` without the whole logits."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from runner.config import compose, load
from runner.config.decisions.loss import LossFacts, resolve_loss
from runner.config.schema.loss import Chunked, LossConfig
from runner.losses import chunk_rows, chunking_unavailable, linear_cross_entropy
from runner.packing import PackedInputs
from tests.after_runs import FAST, train
from tests.test_data_bad_input import refused_in_one_paragraph
from tests.tolerance import drift

needs_chunking = pytest.mark.skipif(chunking_unavailable() is not None, reason=str(chunking_unavailable()))
"""On torch 2.11 and 2.12 (no ``linear_cross_entropy``) only the decision's tests run: see
``test_this_torch_chunks_or_says_why_not``."""

VOCAB, WIDTH, ROWS = 1000, 32, 16


def _case(seed: int = 0, bias: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Hidden states [3, 40, 32] (120 positions: 8 chunks of 16 rows), a weight, a bias and targets with -100 in
    every chunk (every fifth position) and one chunk of nothing else (positions 16-31)."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(3, 40, WIDTH, generator=g)
    weight = torch.randn(VOCAB, WIDTH, generator=g) * 0.1
    b = torch.randn(VOCAB, generator=g) * 0.1 if bias else None
    targets = torch.randint(0, VOCAB, (3, 40), generator=g)
    flat = targets.view(-1)
    flat[::5] = -100
    flat[ROWS:2 * ROWS] = -100
    return hidden, weight, b, targets


def _loss_and_grads(rows: int | None, reduction: str, compiled: str | None = None
                    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    hidden, weight, bias, targets = _case()
    leaves = [t.requires_grad_() for t in (hidden, weight, bias) if t is not None]

    def loss(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, y: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(h, w, y, bias=b, rows=rows, reduction=reduction)  # type: ignore[arg-type]

    fn = torch.compile(loss, backend=compiled) if compiled else loss
    out = fn(hidden, weight, bias, targets)
    # A weighted sum under reduction='none': each position's gradient scaled differently, as a DPO loss does.
    scale = torch.linspace(0.5, 1.5, out.numel()).view(out.shape) if reduction == "none" else torch.ones(())
    grads = torch.autograd.grad((out * scale).sum(), leaves)
    return out.detach(), list(grads)


def _tolerance(reference: torch.Tensor) -> dict[str, float]:
    """One forward and backward: a matmul over the width (log2 32), a softmax over the vocabulary (log2 1000) and a
    reduction over the 120 positions (log2 120), float32, at the size of the values compared."""
    depth = math.ceil(math.log2(WIDTH) + math.log2(VOCAB) + math.log2(120)) + 4
    return drift(1, depth, magnitude=max(float(reference.abs().max()), 1e-3)).kwargs


@needs_chunking
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_chunked_equals_the_whole_logits_with_ignored_targets_everywhere(reduction: str) -> None:
    whole, whole_grads = _loss_and_grads(None, reduction)
    chunked, chunked_grads = _loss_and_grads(ROWS, reduction)
    torch.testing.assert_close(chunked, whole, **_tolerance(whole))
    for got, want in zip(chunked_grads, whole_grads, strict=True):
        torch.testing.assert_close(got, want, **_tolerance(want))
    if reduction == "none":  # each target's loss, 0 where ignored (its negation: the target's log-probability)
        _, _, _, targets = _case()
        assert chunked.shape == targets.shape and bool((chunked[targets == -100] == 0).all())


@needs_chunking
def test_every_target_ignored_is_nan_as_cross_entropy_says() -> None:
    hidden, weight, _, targets = _case(bias=False)
    ignored = torch.full_like(targets, -100)
    assert math.isnan(float(linear_cross_entropy(hidden, weight, ignored, rows=ROWS)))
    assert math.isnan(float(linear_cross_entropy(hidden, weight, ignored)))


@needs_chunking
@pytest.mark.parametrize("compiled", [None, "aot_eager"])
@pytest.mark.parametrize("bad", [VOCAB, -5])
def test_out_of_range_targets_raise(compiled: str | None, bad: int) -> None:
    hidden, weight, _, targets = _case(bias=False)
    targets[2, 7] = bad

    def loss(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(h, weight, y, rows=ROWS)

    fn = torch.compile(loss, backend=compiled) if compiled else loss
    with pytest.raises((RuntimeError, IndexError), match="out of bounds"):
        fn(hidden, targets)


@needs_chunking
@pytest.mark.slow
def test_under_inductor_no_break_the_same_loss_and_bad_targets_raise() -> None:
    """The one thing only Inductor shows: torch's chunked op stays one opaque node of an Inductor graph (no break),
    computes what it computes eagerly, and raises on an out-of-range target, where the whole logits' loss compiled
    by Inductor on the CPU aborts the process (pytorch issue 135546)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    hidden, weight, bias, targets = _case()
    leaves = [t.requires_grad_() for t in (hidden, weight, bias) if t is not None]
    fn = torch.compile(lambda h, w, b, y: linear_cross_entropy(h, w, y, bias=b, rows=ROWS), backend="inductor")
    compiled = fn(hidden, weight, bias, targets)
    compiled_grads = torch.autograd.grad(compiled, leaves)
    eager, eager_grads = _loss_and_grads(ROWS, "mean")
    torch.testing.assert_close(compiled.detach(), eager, **_tolerance(eager))
    for got, want in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(got, want, **_tolerance(want))
    assert sum(counters["graph_break"].values()) == 0
    targets[1, 3] = VOCAB + 7  # the same graph (same shapes), a bad target
    with pytest.raises((RuntimeError, IndexError), match="out of bounds"):
        fn(hidden, weight, bias, targets)
    torch._dynamo.reset()


@needs_chunking
def test_under_autocast_both_multiply_in_bf16_and_agree_to_bf16() -> None:
    """bf16-mixed: the operands in bf16 (what F.linear takes under autocast), float32 accumulation; the chunked
    loss comes back in bf16, so the two agree to bf16's precision (8 bits: 2^-8 of the value, a few roundings)."""
    hidden, weight, _, targets = _case(bias=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        whole = linear_cross_entropy(hidden, weight, targets)
        chunked = linear_cross_entropy(hidden, weight, targets, rows=ROWS)
    assert chunked.dtype == torch.bfloat16
    bf16 = 4 * 2.0**-8  # four roundings at bf16's precision, relative
    torch.testing.assert_close(chunked.float(), whole.float(), rtol=bf16, atol=bf16)


def test_chunk_rows_keep_a_chunk_within_its_budget() -> None:
    assert chunk_rows(128_256) == 512 and chunk_rows(32_000) == 2048 and chunk_rows(256_000) == 256
    assert chunk_rows(128_256, tokens=4096, chunks=3) == 1366
    with pytest.raises(ValueError):
        chunk_rows(128_256, chunks=4)  # a count needs the step's positions


# -- the models: hidden states and the output layer ------------------------------------------------------------
HF = {"llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {},
      "gpt2": {"n_embd": 32, "n_layer": 1, "n_head": 2, "hidden_size": None, "intermediate_size": None,
               "num_hidden_layers": None, "num_attention_heads": None, "num_key_value_heads": None}}


@pytest.mark.parametrize("family", list(HF))
def test_a_transformers_lm_s_logits_are_its_output_layer_of_its_hidden_states(family: str) -> None:
    from runner.models.hf import LOSS_FAMILIES, CausalLM

    overrides = {"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                 "num_attention_heads": 2, "num_key_value_heads": 1, **HF[family]}
    torch.manual_seed(0)
    model = CausalLM(config=family, overrides=overrides).eval()  # eval: no dropout between the two calls
    x = torch.randint(0, 300, (2, 12))
    with torch.no_grad():
        head = model.output_layer()
        assert family in LOSS_FAMILIES and isinstance(head, nn.Linear)
        # The same kernels on the same inputs: the backbone, then lm_head, either way.
        assert torch.equal(head(model(x, return_hidden=True)), model(x))


def test_a_family_that_caps_its_logits_has_no_output_layer_to_chunk() -> None:
    from runner.models.hf import CausalLM

    model = CausalLM(config="gemma2", overrides={"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
                                                 "num_hidden_layers": 1, "num_attention_heads": 2,
                                                 "num_key_value_heads": 1, "head_dim": 16},
                     attn_implementation="eager")
    assert model.output_layer() is None


def _gpt(seed: int = 0) -> nn.Module:
    from runner.models.gpt import GPT

    torch.manual_seed(seed)
    return GPT(vocab_size=VOCAB, n_layer=1, n_head=2, n_embd=WIDTH, block_size=64)


def _module(model: nn.Module, chunked: bool, peft: Any = None) -> Any:
    """A ``TrainModule`` over ``model`` with the loss decided as the builder decides it (2 x 48 positions)."""
    from runner.config.schema.peft import PeftConfig
    from runner.peft import apply_peft
    from runner.training.loss import resolve_loss
    from runner.training.module import TrainModule

    peft = peft or PeftConfig()
    plan = resolve_loss(model, LossConfig(chunked=chunked, chunks=6 if chunked else None), peft,
                        {"batch_size": 2, "seq_len": 48}, None)
    apply_peft(model, peft)
    return TrainModule(model, optimizer=torch.optim.SGD, loss=plan)


def _packed_batch() -> tuple[PackedInputs, torch.Tensor]:
    """Two packed rows of 48: three examples each, -100 at each example's last position and the row's tail."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (2, 48), generator=g)
    docs = torch.tensor([[0] * 20 + [1] * 12 + [2] * 10 + [-1] * 6, [0] * 8 + [1] * 30 + [2] * 10])
    pos = torch.cat([torch.cat([torch.arange(n) for n in lens]) for lens in ([20, 12, 10, 6], [8, 30, 10])]).view(2, 48)
    targets = torch.randint(0, VOCAB, (2, 48), generator=g)
    targets[docs < 0] = -100
    for row, ends in ((0, (19, 31, 41)), (1, (7, 37, 47))):
        targets[row, list(ends)] = -100
    return PackedInputs(ids, pos, docs), targets


def _step_grads(module: Any, batch: tuple[Any, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    loss = module.training_step(batch, 0)
    params = {n: p for n, p in module.named_parameters() if p.requires_grad}
    grads = torch.autograd.grad(loss, list(params.values()))
    return loss.detach(), dict(zip(params, grads, strict=True))


@needs_chunking
@pytest.mark.parametrize("adapter", [None, "lora_on_the_head"])
def test_a_training_step_on_packed_rows_chunked_equals_the_whole_logits(adapter: str | None) -> None:
    """runner's GPT on packed rows (document boundaries, -100 targets), every weight's gradient; and with a LoRA
    adapter whose targets include the (tied) output layer, taken into the chunked loss exactly."""
    from runner.config.schema.peft import PeftConfig, PeftMethod

    peft = PeftConfig(method=PeftMethod.lora, r=4, alpha=8, target_modules=["qkv", "head"]) if adapter else None
    batch = _packed_batch()
    results = []
    for chunked in (False, True):
        module = _module(_gpt(), chunked, peft)
        assert module.loss_fn.chunked is chunked
        if adapter:  # B starts at zero: give the adapter something to add
            with torch.no_grad():
                for p in module.model.parameters():
                    if p.requires_grad:
                        p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
        module.log = lambda *a, **k: None  # type: ignore[method-assign]
        results.append(_step_grads(module, batch))
    (whole, whole_grads), (chunked_loss, chunked_grads) = results
    torch.testing.assert_close(chunked_loss, whole, **_tolerance(whole))
    assert whole_grads.keys() == chunked_grads.keys() and (not adapter or any("head.lora_B" in k for k in whole_grads))
    for name, want in whole_grads.items():
        torch.testing.assert_close(chunked_grads[name], want, **_tolerance(want), msg=name)


# -- the decision ----------------------------------------------------------------------------------------------
def _facts(**kw: Any) -> LossFacts:
    base: dict[str, Any] = dict(mode=Chunked.auto, chunks=None, raw="auto", tokens=4096, vocab=128_256)
    return LossFacts(**{**base, **kw})


def test_auto_chunks_large_logits_only() -> None:
    big = resolve_loss(_facts())
    assert big.chunked and big.rows == 512 and big.chunks == 8 and "1.96 GiB" in big.reason
    small = resolve_loss(_facts(tokens=1024, vocab=32_000))  # 125 MiB of logits: one chunk would be the whole
    assert not small.chunked and small.refusal is None and "within 256 MiB" in small.reason
    assert resolve_loss(_facts(tokens=None)).chunked and not resolve_loss(_facts(tokens=None, vocab=32_000)).chunked
    fixed = resolve_loss(_facts(chunks=3, vocab=32_000, tokens=1024))  # a count asks for chunks whatever the size
    assert fixed.chunked and fixed.chunks == 3 and fixed.rows == 342


def test_one_chunk_is_said_in_the_singular() -> None:
    """loss.chunks=1 (or a step small enough for one chunk): "1 chunk of 96 positions", not "1 chunks"."""
    one = resolve_loss(_facts(mode=Chunked.true, raw=True, chunks=1, tokens=96, vocab=VOCAB))
    assert one.chunked and one.chunks == 1 and one.reason.endswith("; 1 chunk of 96 positions"), one.reason
    assert resolve_loss(_facts(chunks=2, tokens=96, vocab=VOCAB)).reason.endswith("; 2 chunks of 48 positions")


def test_where_it_cannot_chunk_auto_says_so_and_true_is_refused() -> None:
    auto = resolve_loss(_facts(head="OwnLM does not declare its output layer"))
    assert not auto.chunked and auto.refusal is None and "OwnLM" in (auto.note or "")
    true = resolve_loss(_facts(mode=Chunked.true, raw=True, head="OwnLM does not declare its output layer"))
    assert true.refusal and "output_layer()" in true.refusal and "loss.chunked=auto" in true.refusal
    old = resolve_loss(_facts(mode=Chunked.true, raw=True, torch="torch 2.11 has no linear_cross_entropy"))
    assert old.refusal and "torch>=2.13" in old.refusal
    assert not resolve_loss(_facts(torch="torch 2.11 has none")).chunked
    classifier = resolve_loss(_facts(mode=Chunked.true, raw=True, classifier=True, vocab=None))
    assert not classifier.chunked and classifier.refusal is None and "ignored" in (classifier.note or "")


def test_a_qlora_adapted_output_layer_is_not_chunked_a_lora_one_is() -> None:
    from runner.config.decisions.loss import head_problem
    from runner.config.schema.peft import PeftConfig, PeftMethod

    gpt = _gpt()
    why, vocab = head_problem(gpt, PeftConfig(method=PeftMethod.qlora, target_modules=["qkv", "head"]))
    assert vocab == VOCAB and why is not None and "peft=qlora adapts the output layer head" in why
    assert head_problem(gpt, PeftConfig(method=PeftMethod.lora, target_modules=["qkv", "head"])) == (None, VOCAB)
    assert head_problem(gpt, PeftConfig(method=PeftMethod.qlora)) == (None, VOCAB)  # the default leaves it out


@pytest.mark.parametrize("loss", [LossConfig(chunked="maybe"), LossConfig(chunks=0),
                                  LossConfig(chunked=False, chunks=4)])
def test_bad_settings_are_refused(loss: LossConfig) -> None:
    assert resolve_loss(LossFacts(loss.mode, loss.chunks, loss.chunked, vocab=VOCAB, tokens=96)).refusal


class OwnLM(nn.Module):
    """A causal LM of a user's own that does not say where its output layer is."""

    def __init__(self, vocab_size: int = 128_256, width: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab_size, width)
        self.out = nn.Linear(width, vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(x))


OWN = ["model=custom", f"model._target_={__name__}.OwnLM", "data.seq_len=64", "data.batch_size=16"]


def test_true_on_a_model_of_your_own_is_refused_before_the_run() -> None:
    refused_in_one_paragraph([*OWN, "loss.chunked=true"], ["loss.chunked=true", "OwnLM", "output_layer()",
                                                           "return_hidden=True", "loss.chunked=auto"])


@pytest.mark.parametrize("override", ["loss.chunked=maybe", "loss.chunks=0"])
def test_bad_values_are_refused_before_the_run(override: str) -> None:
    refused_in_one_paragraph(["+recipe=smoke", override], [override.split("=")[0]])


def test_auto_on_a_model_of_your_own_falls_back_with_a_word(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    with caplog.at_level("WARNING"):
        cfg = load(compose([*OWN], run_dir=str(tmp_path)))
    assert any("OwnLM" in r.getMessage() and "whole logits" in r.getMessage() for r in caplog.records)
    assert cfg.loss.mode is Chunked.auto


def test_a_classifier_ignores_true_with_a_word(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    with caplog.at_level("WARNING"):
        load(compose(["+recipe=smoke_mlp", "loss.chunked=true"], run_dir=str(tmp_path)))
    assert any("classifier" in r.getMessage() and "ignored" in r.getMessage() for r in caplog.records)


def test_this_torch_chunks_or_says_why_not(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """A Llama with Llama 3's vocabulary, 1,024 positions a step (501 MiB of logits): chunked by default where torch
    has the op (2.13 and later); on 2.11 and 2.12, computed whole with a word, and loss.chunked=true refused."""
    from runner.build import build_module

    llama = ["+recipe=llama_tiny", "model.overrides.vocab_size=128256", "data.seq_len=256", "data.batch_size=4"]
    with caplog.at_level("WARNING"):
        cfg = load(compose(llama, run_dir=str(tmp_path)))
    module: Any = build_module(cfg)
    if chunking_unavailable() is None:
        assert module.loss_fn.chunked and module.loss_plan.decision.chunks == 2
        return
    assert not module.loss_fn.chunked and "linear_cross_entropy" in module.loss_plan.decision.reason
    assert any("whole logits" in r.getMessage() for r in caplog.records)
    refused_in_one_paragraph([*llama, "loss.chunked=true"], ["torch>=2.13", "loss.chunked=auto"])


def test_where_torch_has_no_chunked_op_true_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import runner.losses

    monkeypatch.setattr(runner.losses, "chunking_unavailable", lambda: "torch 2.11.0 has no linear_cross_entropy")
    refused_in_one_paragraph(["+recipe=smoke", "loss.chunked=true"], ["torch 2.11.0", "torch>=2.13"])


# -- through the compile stack: no extra break or recompile --------------------------------------------------
GPT_RUN = ["+recipe=smoke", "model.vocab_size=1024", "data.seq_len=64", "data.batch_size=4", "data.max_bytes=40000",
           "compile.backend=aot_eager", *FAST, "trainer.max_steps=4"]
"""runner's tiny GPT with a 1,024-id vocabulary (the bytes are ids below 256), 256 positions a step."""


@needs_chunking
@pytest.mark.parametrize("overrides", [["compile=model"], ["compile=step_backward", "dynamic=dynamic"],
                                       ["compile=blocks", "data=text_documents", "data.packing=true"],
                                       ["compile=step", "trainer.precision=bf16-mixed"]],
                         ids=["model", "step_backward-dynamic", "blocks-packed", "step-bf16"])
def test_chunked_through_the_stack_adds_no_break_or_recompile(overrides: list[str], tmp_path: Path) -> None:
    settings = {"false": ["loss.chunked=false"], "true": ["loss.chunked=true", "loss.chunks=4"]}
    runs = {name: train(tmp_path / name, [*GPT_RUN, *overrides, *given]).figures for name, given in settings.items()}
    whole, chunked = runs["false"], runs["true"]
    assert chunked["loss/chunked"] is True and chunked["loss/chunks"] == 4 and whole["loss/chunked"] is False
    for key in ("compile/graph_breaks", "compile/recompiles", "compile/graphs"):
        assert chunked[key] == whole[key], (key, chunked[key], whole[key])
    assert chunked["compile/graph_breaks"] == 0
    # The same model, the same batches: the first losses agree (the run's last one may drift by a few steps of SGD).
    assert abs(chunked["train/loss"] - whole["train/loss"]) < 1e-2 * whole["train/loss"]


# -- after training: eval and generate without the whole logits ----------------------------------------------
class _HeadCalls:
    """The shapes the output layer's forward saw (None: it was never called)."""

    def __init__(self, head: nn.Module) -> None:
        self.shapes: list[tuple[int, ...]] = []
        self.handle = head.register_forward_hook(lambda m, i, o: self.shapes.append(tuple(o.shape)))


@needs_chunking
def test_eval_of_a_chunked_run_never_calls_the_head_and_equals_the_whole_logits(tmp_path: Path) -> None:
    from runner.after import evaluate as ev
    from runner.after.source import open_trained

    trained = train(tmp_path / "run", [*GPT_RUN, "compile=eager", "loss.chunked=true"])
    opened = open_trained(trained.run_dir)
    assert opened.module.loss_fn.chunked
    calls = _HeadCalls(opened.model.output_layer())
    from runner.after.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["eval", str(trained.run_dir)]) == 0
    chunked = json.loads((trained.run_dir / "eval.json").read_text())
    # The CLI opened its own copy; count on this one through the same pass.
    from runner.build import build_datamodule

    dm = build_datamodule(opened.cfg)
    dm.setup("validate")
    figures = ev.run_pass(opened.module, dm.val_dataloader(), opened.cfg, [], compiled=False)
    assert calls.shapes == [] and figures["eval/loss"] == pytest.approx(chunked["eval/loss"], rel=1e-6)
    from runner.training.loss import FullLogits

    opened.module.loss_fn = FullLogits()  # the whole logits, for the reference
    whole = ev.run_pass(opened.module, dm.val_dataloader(), opened.cfg, [], compiled=False)
    assert calls.shapes and whole["eval/tokens"] == figures["eval/tokens"]
    assert whole["eval/loss"] == pytest.approx(figures["eval/loss"], rel=drift(1, 40).rtol)


def test_generate_runs_the_head_on_the_last_position_only() -> None:
    from runner.after.generate import Sampling, generate_ids
    from runner.models.hf import CausalLM

    gpt = _gpt()
    calls = _HeadCalls(gpt.output_layer())
    generate_ids(gpt, list(range(1, 20)), Sampling(max_new_tokens=3, temperature=0))
    assert calls.shapes == [(1, 1, VOCAB)] * 3  # the prompt's 19 positions: one row of logits
    torch.manual_seed(0)
    llama = CausalLM(config="llama", overrides={"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
                                                "num_hidden_layers": 1, "num_attention_heads": 2,
                                                "num_key_value_heads": 1})
    calls = _HeadCalls(llama.output_layer())
    generate_ids(llama, list(range(1, 20)), Sampling(max_new_tokens=3, temperature=0))
    assert calls.shapes and all(shape[1] == 1 for shape in calls.shapes)  # transformers' logits_to_keep=1


@needs_chunking
@pytest.mark.parametrize("method", ["lora", "none"])
def test_the_llama3_recipe_fine_tunes_packed_instructions_chunked_by_default(method: str, tmp_path: Path) -> None:
    """``+recipe=instruct_llama3`` (a 128,256-id vocabulary, packed instruction data, the loss on the answers), LoRA
    and in full, shortened: chunked by default (2,048 positions a step: 1 GiB of logits, 4 chunks), one graph, no
    break or recompile, the answers' tokens in the loss; the sample at the end written from the last position."""
    shipped = Path(__file__).resolve().parents[1] / "examples" / "data" / "instruct.jsonl"
    overrides = ["+recipe=instruct_llama3", f"data.path={shipped}", "data.max_examples=120", f"peft={method}",
                 "compile.backend=aot_eager", "model.overrides.hidden_size=32", "model.overrides.intermediate_size=64",
                 "model.overrides.num_hidden_layers=1", "model.overrides.num_attention_heads=2", *FAST,
                 "after.sample_tokens=4"]
    figures = train(tmp_path / "run", overrides).figures
    assert figures["loss/chunked"] is True and figures["loss/chunks"] == 4 and figures["loss/chunk_rows"] == 512
    assert figures["loss/reason"].startswith("auto: a step's float32 logits are 1002 MiB (2,048 positions x 128,256")
    assert figures["compile/graph_breaks"] == 0 and figures["compile/recompiles"] == 0
    assert figures["compile/graphs"] == 1 and figures["data/loss_tokens"] > 0
    assert math.isfinite(figures["train/loss"]) and math.isfinite(figures["val/loss"])
    assert (figures.get("peft/method") == "lora") is (method == "lora")
    assert "What is 12 + 30?" in figures["run/sample"]

