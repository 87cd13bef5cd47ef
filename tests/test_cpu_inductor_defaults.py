"""Inductor options runner sets on the CPU (``runner.stack.compiling.plan.CPU_INDUCTOR_OPTIONS``): where they
apply, that the user's ``compile.options`` win, and that the generated code changes as intended."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from runner.config.schema import Background, CompileConfig, CudaGraphsConfig
from runner.stack.compiling.plan import CPU_INDUCTOR_OPTIONS, resolve_compile_kwargs

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def _options(device: torch.device, **cfg: object) -> dict[str, object] | None:
    return resolve_compile_kwargs(CompileConfig(**cfg), CudaGraphsConfig(), None, device).get("options")  # type: ignore[arg-type]


def test_inductor_on_cpu_gets_runner_defaults() -> None:
    assert _options(CPU) == CPU_INDUCTOR_OPTIONS


def test_user_options_win_and_are_kept() -> None:
    assert _options(CPU, options={"realize_opcount_threshold": 50, "cpp_wrapper": True}) == {
        "realize_opcount_threshold": 50, "cpp_wrapper": True}
    assert _options(CPU, options={"cpp_wrapper": True}) == {**CPU_INDUCTOR_OPTIONS, "cpp_wrapper": True}


@pytest.mark.parametrize("case", [
    {"device": CUDA},  # GPU heuristics are Inductor's own
    {"device": CPU, "backend": "aot_eager"},  # no Inductor, no Inductor options
    {"device": CPU, "backend": "eager"},
    {"device": CPU, "mode": "max-autotune-no-cudagraphs"},  # torch takes a mode or options, not both
])
def test_defaults_only_for_inductor_on_cpu_without_a_mode(case: dict[str, object]) -> None:
    case = dict(case)
    device = case.pop("device")
    assert _options(device, **case) is None  # type: ignore[arg-type]


class _Residual(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.gelu(self.fc(self.norm(x)))


@pytest.mark.slow
def test_strategy_stores_a_residual_gelu_stream_once_per_block() -> None:
    """Through ``CompileStrategy`` (the plan, the stack, the compiled step): with Inductor's CPU
    defaults the forward of this 4-block stream evaluated erf 22 times (every LayerNorm loop
    recomputes the earlier GELUs); with runner's options, at most once per GELU."""
    import lightning as L
    from torch._inductor.utils import run_and_get_code
    from torch.utils.data import DataLoader, TensorDataset

    from runner.strategy import CompileStrategy
    from runner.training.module import TrainModule

    depth = 4
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), *(_Residual(16) for _ in range(depth)), nn.Linear(16, 2))
    module = TrainModule(model, optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3))
    data = DataLoader(TensorDataset(torch.randn(16, 8), torch.randint(0, 2, (16,))), batch_size=8)
    strategy = CompileStrategy(compile=CompileConfig(background=Background.disabled), device="cpu")  # compiles step 1
    trainer = L.Trainer(accelerator="cpu", devices=1, strategy=strategy, max_steps=1, limit_val_batches=0,
                        num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, logger=False)
    _, code = run_and_get_code(lambda: trainer.fit(module, data))
    assert strategy.stack.figures()["compile/options"] == CPU_INDUCTOR_OPTIONS
    forward = code[0]
    assert 0 < forward.count(".erf()") <= depth, forward
