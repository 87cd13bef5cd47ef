"""The compile stack's rules that both the config check and the stack enforce, each written once: its condition
beside its message, in one function of plain values.

``runner.config.checks_stack`` calls each with what the config says, before anything runs (``python -m
runner``); the stack calls the same function with what it finds at fit time (a user's own ``Trainer``, where
no config check ran: the scaler Lightning built, the device, the model's module names). Each returns the
refusal in one paragraph (what, why, the fix) or None.
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.config.options import Eagerly, OffloadStrategy, Scope
from runner.config.schema import OptimizerPolicy


def compiled_optimizer_with_scaler(policy: OptimizerPolicy, scaler: bool, name: str = "the optimizer's") -> str | None:
    """A compiled optimizer step cannot take part in a gradient scaler's unscale and inf/NaN skip."""
    if policy is not OptimizerPolicy.compiled or not scaler:
        return None
    return (f"compile.optimizer=compiled with a gradient scaler (trainer.precision=16-mixed): the scaler unscales "
            f"the gradients and skips steps with inf/NaN itself, which a compiled {name} step cannot take part in "
            "(torch would run it eagerly every step, Adam's single-tensor path with a host sync per parameter). "
            "Use compile.optimizer=auto (the fused kernel where there is one, which the scaler drives) or "
            "trainer.precision=bf16-mixed (no scaler).")


def cudagraphs_with_accumulation(cudagraphs: bool, accumulate_grad_batches: int) -> str | None:
    """Replaying the backward graph per micro-batch overwrites the gradients of the earlier ones."""
    if not cudagraphs or accumulate_grad_batches <= 1:
        return None
    return (f"cudagraphs=reduce_overhead with trainer.accumulate_grad_batches={accumulate_grad_batches}: each "
            "micro-batch replays the backward graph into the same static output buffers, so the gradients of "
            "earlier micro-batches are overwritten before the optimizer step (pytorch/pytorch#169545). Use "
            "trainer.accumulate_grad_batches=1 with a larger data.batch_size, or cudagraphs=disabled.")


def offload_exclusions_lost(strategy: OffloadStrategy, exclude: Sequence[str], on_cuda: bool, scope: Scope,
                            inside_compiled: Sequence[str] | None = None) -> str | None:
    """A strategy whose hooks run eagerly (``offload=cpu``) cannot honour ``offload.exclude`` for modules that run
    inside compiled code: there a saved tensor no longer tells which module saved it.

    ``inside_compiled``: the excluded modules that run compiled, where the model is known (the stack); None before
    it exists (the config check), where every name counts under a scope that compiles the whole model and none
    is decided yet under ``scope=blocks``."""
    row = strategy.row
    if row.traced or (row.cuda_only and not on_cuda) or not exclude or not scope.row.saves_across_graphs:
        return None
    if inside_compiled is None:
        inside_compiled = list(exclude) if scope.row.eagerly is Eagerly.none else []
    if not inside_compiled:
        return None
    return (f"offload={strategy.value} with offload.exclude={list(exclude)} under compile.scope={scope.value}: the "
            f"{strategy.value} strategy's hooks run eagerly on what each compiled forward saved, where a saved "
            f"tensor no longer tells which module saved it, so the exclusion of {', '.join(inside_compiled)} would "
            "be silently ignored (those activations offloaded too). Use offload.exclude=[] to offload everything, "
            "compile.scope=blocks (modules outside the blocks, such as the head, run eagerly and keep theirs), or "
            "offload=bf16 (its hooks are traced into the compiled graphs and honour offload.exclude).")
