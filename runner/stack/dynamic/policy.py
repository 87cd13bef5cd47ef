"""The ``dynamic`` group as a stack component: how batches whose lengths vary meet the compiler."""

from __future__ import annotations

import dataclasses
import time
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import torch

from runner.config.schema import AfterWarmup, DynamicConfig, ShapePolicy
from runner.config.schema.options import Mark, Pad
from runner.data.batch import iter_tensors
from runner.data.sequences.padding import IGNORE_INDEX, PadTo
from runner.stack.dynamic.agreement import Agreement, ShapeAgreement, resolve_agreement, shapes_of, world_size
from runner.stack.settings import StackComponent
from runner.stack.step_mode import Eager, StepMode
from runner.torch_internals import errors, observation, runtime

_MAX_REASONS = 20
_METRICS_LIMIT = 4096  # compile records torch keeps (its default, 64, loses a long run's)


class RecompileAfterWarmupError(RuntimeError):
    """A new shape after warm-up under ``dynamic.after_warmup=fail_on_recompile``."""


def resolve_dynamic_arg(policy: ShapePolicy) -> bool | None:
    """``torch.compile(dynamic=...)`` for the policy: padded policies compile static graphs only;
    the others leave it to marks (``dynamic``, ``unbacked``) or to automatic dynamic."""
    return policy.row.compile_dynamic


def resolve_bounds(cfg: DynamicConfig, max_len: int | None) -> DynamicConfig:
    """The config with ``max`` filled in from the data's longest sequence when left unset."""
    if cfg.max is not None or max_len is None or not cfg.policy.row.marks_dims:
        return cfg
    return dataclasses.replace(cfg, max=max_len)


def resolve_pad_to(cfg: DynamicConfig, max_len: int) -> PadTo:
    """Where the collate pads a batch: to ``max_len`` (static), the next bucket, or its longest sequence."""
    pad = cfg.policy.row.pad
    if pad is Pad.max_length:
        return PadTo((max_len,))
    if pad is Pad.buckets:
        return PadTo(tuple(sorted(set(cfg.buckets))))
    return PadTo()


def targets_of(batch: Any) -> torch.Tensor | None:
    """The targets of an ``(inputs, targets)`` batch with integer sequence targets (padding =
    IGNORE_INDEX). One label per sample (1-d targets) has no sequence to pad: None."""
    if isinstance(batch, (list, tuple)) and len(batch) == 2 and isinstance(batch[1], torch.Tensor):
        y = batch[1]
        if y.dim() >= 2 and not y.is_floating_point() and not y.is_complex():
            return y
    return None


def trailing_padding(targets: torch.Tensor) -> torch.Tensor:
    """Padded positions of ``[batch, seq]`` targets: each row's ``IGNORE_INDEX`` run at its end. Padding is always
    there; an instruction example's prompt (also ``IGNORE_INDEX``, never at the end: an answer ends each example)
    is not padding."""
    flat = targets.reshape(-1, targets.shape[-1])
    positions = torch.arange(1, flat.shape[-1] + 1, device=flat.device)
    last = ((flat != IGNORE_INDEX) * positions).amax(dim=-1)
    return (flat.shape[-1] - last).sum()


def format_recompile_error(exc: BaseException, step: int, cfg: DynamicConfig, shapes: list[tuple[int, ...]]) -> str:
    """torch's message (it names the failed guard) with what runner knows: when, which shapes, the fix."""
    return (f"recompile after warm-up (dynamic.after_warmup=fail_on_recompile, warm-up {cfg.warmup_steps} steps): "
            f"training step {step} brought batch shapes {shapes} that no compiled graph accepts under "
            f"dynamic.policy={cfg.policy.value}.\n{exc}\nFix: use dynamic.policy=dynamic (one graph for all "
            "lengths) or bucket, raise dynamic.warmup_steps so warm-up sees every shape, or set "
            "dynamic.after_warmup=eager_on_recompile to run unseen shapes eagerly.")


class ShapePolicyComponent(StackComponent):
    """Applies the shape policy: compiler settings once, dim marking per batch, the stance after warm-up
    and the agreement's eager holds (asked of the fit's step mode), and its own figures."""

    name = "dynamic"

    def __init__(self, cfg: DynamicConfig, step_mode: StepMode | None = None) -> None:
        self.cfg = cfg
        self.step_mode = step_mode or StepMode()
        self.dynamic_arg = resolve_dynamic_arg(cfg.policy)
        self.agreement = Agreement.local
        self._sync: ShapeAgreement | None = None
        self._hold = False  # this step runs eagerly: it saw a size the ranks have not agreed on yet
        self.steps = 0
        self.graphs = 0
        self._padding: torch.Tensor | int = 0
        self._tokens = 0
        self._batch: Any = None
        self._before = 0
        self._since_us = _now_us()
        self._final: dict[str, Any] | None = None
        self._in_step = False
        self._step_compile_ids: set[str] = set()

    # -- once ----------------------------------------------------------------------------------
    def configure(self) -> None:
        self.agreement = resolve_agreement(self.cfg.policy, world_size(), self.cfg.compiler_collectives)
        settings = self.torch_settings
        settings.dynamo("recompile_limit", self.cfg.recompile_limit)
        settings.dynamo("specialize_float", self.cfg.specialize_float)
        # Padded policies want one static graph per length, never a dynamic one.
        settings.dynamo("automatic_dynamic_shapes", self.dynamic_arg is None)
        if self.agreement is Agreement.runner:
            import torch.distributed as dist

            # A group of its own (all ranks call configure), so the exchange never queues behind DDP's buckets.
            self._sync = ShapeAgreement(dist.new_group(backend="gloo"))
        settings.compilation_metrics_limit(_METRICS_LIMIT)
        if self.cfg.after_warmup is not AfterWarmup.none:  # inside training steps only: validation is unaffected
            self.step_mode.after_warmup(self.cfg.after_warmup.value, from_step=self.cfg.warmup_steps)
        self._since_us = _now_us()
        self.listen(self._on_compile_start)

    def _on_compile_start(self, trigger: str, compile_id: str) -> None:
        # The policy's figures are about the training step's frame: compiles started while a training
        # step runs (its forward, its continuations), not the optimizer step's or validation's.
        if self._in_step and trigger == "DYNAMO":
            self._step_compile_ids.add(compile_id)

    # -- per step ------------------------------------------------------------------------------
    def prepare_batch(self, batch: Any) -> Any:
        self._batch = batch  # its shapes are read only when a recompile error needs them
        y = targets_of(batch)
        if y is not None:
            # Summed on the device, read once in figures(): no host sync per step.
            self._padding = self._padding + trailing_padding(y)
            self._tokens += y.numel()
        mark, c = self.cfg.policy.row.mark, self.cfg
        if self._sync is None and mark is Mark.none:
            return batch  # nothing to mark (the common case): no walk over the batch
        tensors = list(iter_tensors(batch))
        agreed, self._hold = self._sync.observe(shapes_of(tensors)) if self._sync is not None else (set(), False)
        if self._hold:  # this rank alone must not recompile: the ranks agree at a later step (agreement.py)
            self.step_mode.eager_next_step(Eager.hold)
        for i, t in enumerate(tensors):
            marked: set[int] = set()
            if mark is not Mark.none:
                for dim in c.dims:
                    if not -t.dim() <= dim < t.dim():
                        continue  # e.g. dim 1 of a 1-d tensor
                    d = dim % t.dim()
                    if mark is Mark.dynamic:
                        runtime.mark_dynamic(t, d, min=c.min, max=c.max)
                    else:
                        # One symbol per dim for every tensor (inputs and targets have one length): a
                        # runtime assert checks it. A size in the id would be guarded and recompile.
                        runtime.mark_unbacked(t, d, min=c.min, max=c.max, shape_id=f"dim{d}")
                    marked.add(d)
            for j, d in agreed:
                if j == i and d not in marked:
                    runtime.maybe_mark_dynamic(t, d)
        return batch

    def step_context(self) -> ContextManager[Any]:
        return self  # the training step's context: the component itself, not a generator (entered on every step)

    def __enter__(self) -> None:
        self._before = observation.graphs_compiled()
        self._in_step = True

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if isinstance(exc, RuntimeError) and errors.is_fail_on_recompile(exc):
                shapes = shapes_of(list(iter_tensors(self._batch)))
                raise RecompileAfterWarmupError(format_recompile_error(exc, self.steps, self.cfg, shapes)) from exc
        finally:
            self._in_step, self._hold = False, False
            self._batch = None  # the batch is Lightning's again once the step is over
            self.graphs += observation.graphs_compiled() - self._before

    def on_step_end(self, step: int) -> None:
        self.steps = step

    # -- report --------------------------------------------------------------------------------
    def teardown(self) -> None:
        # Freeze the figures first: restoring torch's compile-record limit may drop this run's records.
        self._final = self.figures()
        if self._sync is not None:
            self._sync.close()
        super().teardown()

    def figures(self) -> dict[str, Any]:
        if self._final is not None:
            return dict(self._final)
        # This run's training-step compiles: torch's records since configure() whose compile started inside
        # a training step (forward and its deferred backward share the compile id).
        records = [r for r in map(observation.to_record, observation.compilation_metrics())
                   if (r.start_us or 0) >= self._since_us and r.compile_id in self._step_compile_ids]
        reasons = [r.recompile_reason for r in records if r.is_forward and r.recompile_reason]
        waste = 100.0 * float(self._padding) / self._tokens if self._tokens else None  # of every batch's target tokens
        out: dict[str, Any] = {
            "dynamic/policy": self.cfg.policy.value,
            "dynamic/after_warmup": self.cfg.after_warmup.value,
            "dynamic/agreement": self.agreement.value,
            "dynamic/graphs": self.graphs,
            "dynamic/frame_compiles": sum(1 for r in records if r.is_forward),
            "dynamic/recompiles": len(reasons),
            "dynamic/recompile_reasons": reasons[:_MAX_REASONS],
            "dynamic/compile_s": round(sum(r.total_s for r in records), 3),
            "dynamic/padding_waste_pct": None if waste is None else round(waste, 2),
        }
        if self._sync is not None:
            out["dynamic/agreed_dynamic_dims"] = sorted(self._sync.dynamic)
            out["dynamic/agreement_exchanges"] = self._sync.exchanges
            out["dynamic/agreement_checks"] = self._sync.checks
            out["dynamic/agreement_held_steps"] = self._sync.held_steps
        return out


def _now_us() -> int:
    """Wall-clock microseconds: the clock of torch's compile records (``start_time_us``)."""
    return time.time_ns() // 1000


def build_shape_policy(cfg: DynamicConfig, step_mode: StepMode) -> ShapePolicyComponent:
    """The shape-policy component for the stack; ``dynamic_arg`` goes to ``torch.compile(dynamic=...)``."""
    return ShapePolicyComponent(cfg, step_mode)
