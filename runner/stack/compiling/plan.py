"""Every ``compile.scope`` decision, as pure ``resolve_*`` functions returning a ``CompilePlan``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.optim import Optimizer

from runner.config.decisions.stack import CudaGraphsDecision, CudaGraphsFacts, cudagraphs_decision
from runner.config.schema import CompileConfig, CudaGraphsConfig, OptimizerPolicy, Scope
from runner.stack.compiling.optimizer_policy import StepFacts, capture_blocker, resolve_optimizer_policy


@dataclass(frozen=True)
class CompilePlan:
    """What the compile stack compiles and how; decided once per run by :func:`resolve_plan`."""

    scope: Scope
    target: Scope
    kwargs: dict[str, Any] = field(default_factory=dict)
    block_types: tuple[str, ...] = ()
    optimizer: OptimizerPolicy = OptimizerPolicy.none
    optimizer_reason: str = "no optimizer"
    optimizer_blocker: str | None = None
    compiled_autograd: bool = False
    cudagraphs: bool = False
    cudagraphs_decision: CudaGraphsDecision = CudaGraphsDecision(False, "cudagraphs=disabled", worth_saying=False)
    uncaptured_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def compiles(self) -> bool:
        """Whether anything is compiled at all."""
        return self.target.row.compiles

    @property
    def backward_in_step(self) -> bool:
        """Whether the compiled step already ran backward (Lightning's backward is skipped)."""
        return self.target.row.backward_in_step

    @property
    def whole_step(self) -> bool:
        """Whether the training step is compiled as one call (and its batch and logging captured)."""
        return self.target.row.whole_step

    @property
    def target_name(self) -> str:
        """What ``compile/target`` calls what is compiled in the report."""
        return self.target.row.report_name

    def without_cudagraphs(self) -> CompilePlan:
        """The same plan, captured in no CUDA graph (for steps that are never replayed)."""
        return dataclasses.replace(self, kwargs=dict(self.uncaptured_kwargs), cudagraphs=False)

    @property
    def compiled_autograd_kwargs(self) -> dict[str, Any]:
        """The ``torch.compile`` arguments compiled autograd's compiler takes."""
        return {k: v for k, v in self.kwargs.items() if k in ("backend", "fullgraph", "mode", "options")}

    @property
    def optimizer_kwargs(self) -> dict[str, Any]:
        """The ``torch.compile`` arguments of a compiled optimizer step. Its shapes never vary (no
        ``dynamic``), and ``fullgraph`` stays off: ``Optimizer.step``'s ``_use_grad`` wrapper breaks the
        graph on purpose, so ``compile.fullgraph=true`` (meant for the model) would crash it."""
        return {k: v for k, v in self.kwargs.items() if k not in ("dynamic", "fullgraph")}


def cudagraphs_facts(cfg: CompileConfig, device: torch.device) -> CudaGraphsFacts:
    """What the compile config and the device alone say about ``cudagraphs=auto``; the rest at its conservative
    default (shapes that may vary), for callers that know no more (the stack passes every fact it found)."""
    return CudaGraphsFacts(on_cuda=device.type == "cuda", backend=cfg.backend, compiles=cfg.scope.row.compiles,
                           compile_mode=cfg.mode)


def cudagraphs_on(cudagraphs: CudaGraphsConfig, cfg: CompileConfig, device: torch.device,
                  facts: CudaGraphsFacts | None = None) -> CudaGraphsDecision:
    """Whether the run captures CUDA graphs, and why (``decisions.stack.cudagraphs_decision``): never off
    a CUDA device (there torch would silently ignore every CUDA-graph option; the stack reports them inactive)."""
    return cudagraphs_decision(cudagraphs.mode, facts or cudagraphs_facts(cfg, device))


# Inductor's defaults that runner overrides on the CPU, each with the measurement behind it.
#
# ``realize_opcount_threshold``: Inductor inlines a pointwise producer into each of its consumers
# until its body exceeds this many ops (CPU default 50, GPU 30), and it realizes a reused CPU producer
# early only when it holds a "heavy" op (exp, log, sigmoid, tanh...; ``erf`` is not on the list). A
# residual stream ``x + gelu(fc(norm(x)))`` therefore stays inline: every LayerNorm recomputes the
# whole chain of earlier GELUs (erf) in each of its three loops. On the compare MLP (50 residual
# blocks, width 128) the forward evaluated erf 22 times for 4 GELUs, and the compiled forward ran
# slower than eager; at 10 the residual is stored once per block (3 erf for 4 GELUs) and the whole
# training step was 0.89-0.92x the default's (three in-process A/B runs, 2026-11-23, fused AdamW);
# the GPT's step did not move (1.03 and 0.99 in two A/B runs: noise). A user's ``compile.options`` entry wins.
CPU_INDUCTOR_OPTIONS: dict[str, Any] = {"realize_opcount_threshold": 10}


def default_options(cfg: CompileConfig, device: torch.device) -> dict[str, Any]:
    """The Inductor options runner adds for ``device`` (see ``CPU_INDUCTOR_OPTIONS``): only for
    Inductor on the CPU, and only without ``compile.mode`` (torch takes a mode or options, not both)."""
    if cfg.backend != "inductor" or device.type != "cpu" or cfg.mode is not None:
        return {}
    return dict(CPU_INDUCTOR_OPTIONS)


def resolve_compile_kwargs(cfg: CompileConfig, cudagraphs: CudaGraphsConfig, dynamic: bool | None,
                           device: torch.device, facts: CudaGraphsFacts | None = None) -> dict[str, Any]:
    """Arguments for every ``torch.compile`` call of the run."""
    return _compile_kwargs(cfg, cudagraphs_on(cudagraphs, cfg, device, facts).on, dynamic, device)


def _compile_kwargs(cfg: CompileConfig, graphs: bool, dynamic: bool | None, device: torch.device) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"backend": cfg.backend, "fullgraph": cfg.fullgraph, "dynamic": dynamic}
    mode = cfg.mode
    options = {**default_options(cfg, device), **cfg.options}
    if mode == "max-autotune" and not graphs:
        mode = "max-autotune-no-cudagraphs"
    if graphs and mode is None:
        if options:
            options["triton.cudagraphs"] = True
        else:
            mode = "reduce-overhead"
    if mode is not None:
        kwargs["mode"] = mode
    if options:
        kwargs["options"] = options
    return kwargs


def resolve_optimizers(plan: CompilePlan, policy: OptimizerPolicy, optimizers: list[Optimizer],
                       device: torch.device, scaler: bool = False, facts: StepFacts | None = None) -> CompilePlan:
    """``plan`` with the optimizer policy resolved for ``optimizers`` (one policy for all; the last optimizer's reason
    is reported). Called once the optimizers hold their final parameters (under FSDP2: after sharding)."""
    facts = facts or StepFacts(scaler=scaler)
    blocker = capture_blocker(optimizers, device, facts)
    resolved, reason = policy, "no optimizer"
    for opt in optimizers:
        resolved, reason = resolve_optimizer_policy(policy, opt, device, plan.cudagraphs, facts.scaler, blocker)
    return dataclasses.replace(plan, optimizer=resolved, optimizer_reason=reason, optimizer_blocker=blocker)


def resolve_plan(cfg: CompileConfig, cudagraphs: CudaGraphsConfig, dynamic: bool | None, device: torch.device,
                 automatic_optimization: bool = True, pulls_batches: bool = False,
                 reads_results: bool = False, facts: CudaGraphsFacts | None = None) -> CompilePlan:
    """The plan for a run before its optimizers exist: target, ``torch.compile`` arguments, CUDA graphs (the
    optimizer policy is resolved by :func:`resolve_optimizers` once the optimizers hold their parameters).
    ``facts``: what the fit found that decides ``cudagraphs=auto`` (None: :func:`cudagraphs_facts`)."""
    graphs = cudagraphs_on(cudagraphs, cfg, device, facts)
    plan = CompilePlan(
        scope=cfg.scope,
        target=cfg.scope,
        kwargs=_compile_kwargs(cfg, graphs.on, dynamic, device),
        uncaptured_kwargs=_compile_kwargs(cfg, False, dynamic, device),
        block_types=tuple(cfg.block_types),
        optimizer=cfg.optimizer,
        compiled_autograd=cfg.compiled_autograd,
        cudagraphs=graphs.on,
        cudagraphs_decision=graphs,
    )
    return resolve_step_target(plan, step_blocker(automatic_optimization, pulls_batches, reads_results) is None)


# Manual optimization: compile the model's forwards, run the step's orchestration eagerly.
#
# A manual-optimization ``training_step`` (``automatic_optimization = False``) is orchestration by
# definition: ``self.manual_backward``, ``opt.step()``, ``opt.zero_grad()``, ``self.toggle_optimizer``
# and scheduler steps sit between the forwards, and every later forward depends on the parameters the
# earlier ``opt.step()`` changed (a GAN's generator step reads the discriminator just updated). Compiling
# the whole step makes Dynamo trace Lightning's strategy, precision plugin, callbacks and the optimizer:
# measured on the zoo's GAN (``tests/zoo/gan.py``, eager backend) that is 10 graphs, 12 graph-break
# sites (``Tensor.backward()``, ``requires_grad`` setattr in ``toggle_optimizer``, Lightning's logging
# calls), 8 recompiles, 5 frames falling back to eager, 12 s of compiling and losses that drift from
# eager's (the traced Adam step). So the plan compiles what carries the compute instead, the LightningModule's
# submodules in place (``scope=model``), each with its AOTAutograd backward: 4 graphs, 0 breaks, eager's
# exact losses; the two recompiles are the discriminator's and generator's ``requires_grad`` flipping
# under ``toggle_optimizer``, both in the first step.
def resolve_step_target(plan: CompilePlan, step_compilable: bool) -> CompilePlan:
    """The plan unchanged unless it compiles a step that cannot be compiled as a whole (manual
    optimization, or a ``dataloader_iter`` step that pulls its own batches): then its submodules."""
    if step_compilable or not plan.whole_step:
        return plan
    return dataclasses.replace(plan, target=Scope.model)


def step_blocker(automatic_optimization: bool, pulls_batches: bool = False, reads_results: bool = False) -> str | None:
    """Why the training step cannot be compiled as a whole (None: it can)."""
    if not automatic_optimization:
        return ("a manual-optimization module (the step's manual_backward/opt.step orchestration runs eagerly, "
                "as in Lightning)")
    if pulls_batches:
        return ("a training_step that pulls its own batches from dataloader_iter (the batch never reaches the "
                "step as an argument)")
    if reads_results:
        return ("a training_step that reads back what it logged (the trainer's results or callback_metrics): "
                "Lightning makes a logged value visible there at once, which a compiled step, logging after its "
                "graph, would not")
    return None


def step_note(scope: Scope, resolved: CompilePlan, blocker: str | None) -> str | None:
    """One line for the log when a step scope became submodules, else None."""
    if blocker is None or resolved.target is scope or not scope.row.whole_step:
        return None
    return f"compile.scope={scope.value} on {blocker}: compiling its submodules' forwards"
