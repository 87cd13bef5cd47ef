"""The compile stack's decisions (compile, dynamic shapes, offload, CUDA graphs, FSDP and how they meet the trainer).
A rule the fit enforces too is one function of plain values, called here with the config and by the stack with what
it finds (a user's own ``Trainer``); each returns its refusal (what, why, the fix) or None."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from runner.config.cache_secret import SECRET_ENV, SECRET_FILE_ENV, SECRET_HINT, read_secret, redact_url
from runner.config.decisions import gpu_defaults
from runner.config.schema import AfterWarmup, Background, CacheTrust, CudaGraphMode, OnError, OptimizerPolicy, RunConfig
from runner.config.schema.options import Eagerly, Keeps, Mark, OffloadStrategy, Scope, ShapePolicy
from runner.torch_internals import runtime


def compiled_optimizer_with_scaler(policy: OptimizerPolicy, scaler: bool) -> str | None:
    """A compiled optimizer step cannot take part in a gradient scaler's unscale and inf/NaN skip."""
    if policy is not OptimizerPolicy.compiled or not scaler:
        return None
    return ("compile.optimizer=compiled with a gradient scaler (trainer.precision=16-mixed): the scaler unscales "
            "the gradients and skips steps with inf/NaN itself, which a compiled the optimizer's step cannot take "
            "part in (torch would run it eagerly every step, Adam's single-tensor path with a host sync per "
            "parameter). Use compile.optimizer=auto (the fused kernel where there is one, which the scaler drives) or "
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
    """Eager offload hooks (``offload=cpu``) cannot honour ``offload.exclude`` inside compiled code, where a saved
    tensor no longer tells which module saved it. ``inside_compiled``: the excluded modules that run compiled (None
    before the model exists: all of them unless ``scope=blocks``, where the stack decides)."""
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


# The share of the device's memory cudagraphs=auto wants free: CUDA-graph trees keep a memory pool of their own
# (static inputs, outputs, what a recorded forward saves) beside the caching allocator, and an out-of-memory that
# eager would not hit is worse than a slower step.
MIN_FREE_MEMORY = 0.25


@dataclass(frozen=True)
class CudaGraphsFacts:
    """What decides ``cudagraphs=auto``: the config and, at fit time, what the stack found (plain values)."""

    on_cuda: bool
    backend: str = "inductor"
    compiles: bool = True  # compile.scope compiles something
    scope: Scope = Scope.step
    compile_mode: str | None = None
    shape: ShapePolicy = ShapePolicy.automatic
    offload: OffloadStrategy = OffloadStrategy.none
    accumulate_grad_batches: int = 1
    processes: int = 1  # DDP or FSDP ranks
    sharded: bool = False  # FSDP2 shards the parameters
    free_memory: float | None = None  # the device's share free when the stack is applied (None: the config check)


@dataclass(frozen=True)
class CudaGraphsDecision:
    """Whether the run captures CUDA graphs, and why (``cudagraphs/decision`` in the report)."""

    on: bool
    reason: str
    worth_saying: bool = True  # the end-of-fit line says it when off (not disabled, nor auto on a CPU)

    def describe(self) -> str:
        return f"{'on' if self.on else 'off'}: {self.reason}"


def cudagraphs_decision(mode: CudaGraphMode, facts: CudaGraphsFacts) -> CudaGraphsDecision:
    """Whether CUDA graphs are on, and why: ``disabled`` never, ``reduce_overhead`` on every CUDA device, ``auto``
    only where the step is eligible (conservative: runner's defaults are never worse than what it wraps)."""
    if mode is CudaGraphMode.disabled:
        return CudaGraphsDecision(False, "cudagraphs=disabled", worth_saying=False)
    asked = f"cudagraphs={mode.value}"
    if not facts.on_cuda:
        return CudaGraphsDecision(False, f"{asked}: no CUDA device", worth_saying=mode is CudaGraphMode.reduce_overhead)
    if mode is CudaGraphMode.reduce_overhead:
        return CudaGraphsDecision(True, f"{asked}: asked for")
    why = _auto_blocker(facts)
    if why is not None:
        return CudaGraphsDecision(False, f"{asked}: {why}")
    free = "" if facts.free_memory is None else f", {facts.free_memory:.0%} of the device's memory free"
    return CudaGraphsDecision(True, (f"{asked}: the step is eligible (compile.backend=inductor, "
                                     f"dynamic.policy={facts.shape.value}, no CPU offload, no accumulation, "
                                     f"one process{free})"))


def cudagraphs_refusal(mode: CudaGraphMode, f: CudaGraphsFacts) -> str | None:
    """What cannot work beside ``cudagraphs=reduce_overhead`` (``auto`` leaves CUDA graphs off there instead)."""
    if mode is not CudaGraphMode.reduce_overhead:
        return None
    if not f.shape.row.cudagraphs:
        return (f"cudagraphs=reduce_overhead with dynamic.policy={f.shape.value}: a CUDA graph records fixed sizes, "
                "and unbacked sizes are unknown until run time. Use dynamic=bucket (one graph per bucket) or "
                "cudagraphs=disabled.")
    if problem := cudagraphs_with_accumulation(True, f.accumulate_grad_batches):
        return problem
    if not f.compiles:
        return (f"cudagraphs=reduce_overhead with compile.scope={f.scope.value}: CUDA graphs record "
                "compiled graphs, and nothing is compiled. Pick a scope (compile=step) or use cudagraphs=disabled.")
    if f.backend != "inductor":
        return (f"cudagraphs=reduce_overhead with compile.backend={f.backend}: CUDA-graph trees are "
                "Inductor's; other backends would drop them silently. Use compile.backend=inductor or "
                "cudagraphs=disabled.")
    if not f.offload.row.cudagraphs:
        return (f"cudagraphs=reduce_overhead with offload={f.offload.value}: offloading to host memory "
                "runs stream and event calls in eager saved-tensor hooks, which a CUDA graph cannot capture or "
                "replay. Use offload=bf16 or offload=checkpoint (both work under CUDA graphs), or cudagraphs=disabled.")
    if f.compile_mode not in (None, "max-autotune"):
        return (f"cudagraphs=reduce_overhead with compile.mode={f.compile_mode}: the cudagraphs group sets the "
                "mode (reduce-overhead). Leave compile.mode unset, or use compile.mode=max-autotune (which "
                "includes CUDA graphs).")
    if f.sharded:
        return ("cudagraphs=reduce_overhead with trainer.distributed=fsdp: FSDP2 allocates and frees the gathered "
                "parameters around every block, outside the compiled graphs, so no static addresses exist to "
                "record. Use cudagraphs=disabled with FSDP, or trainer.distributed=ddp.")
    return None


def _auto_blocker(f: CudaGraphsFacts) -> str | None:
    """Why ``cudagraphs=auto`` leaves CUDA graphs off on a CUDA device (None: nothing does)."""
    if not gpu_defaults.CUDAGRAPHS_AUTO:
        return ("the GPU rows measured CUDA graphs slower than none (runner.config.decisions.gpu_defaults, "
                "docs/gpu.md); cudagraphs=reduce_overhead still turns them on")
    if not f.compiles:
        return "nothing is compiled (compile.scope=none), and CUDA graphs record compiled graphs"
    if f.backend != "inductor":
        return f"compile.backend={f.backend}: CUDA-graph trees are Inductor's"
    if f.compile_mode is not None:
        return f"compile.mode={f.compile_mode} is set, and auto leaves a chosen mode as it is"
    if f.shape.row.compile_dynamic is not False:
        return (f"dynamic.policy={f.shape.value}: shapes may vary, and a CUDA graph records one size (auto turns "
                "them on with dynamic=static or dynamic=bucket)")
    if not f.offload.row.cudagraphs:
        return f"offload={f.offload.value}: its eager stream and event calls cannot be captured"
    if f.accumulate_grad_batches > 1:
        return (f"trainer.accumulate_grad_batches={f.accumulate_grad_batches}: a replayed backward overwrites the "
                "gradients of the earlier micro-batches (pytorch/pytorch#169545)")
    if f.sharded:
        return "FSDP2 gathers and frees parameters outside the graphs: no static addresses to record"
    if f.processes > 1:
        return f"{f.processes} processes (DDP): not yet measured under CUDA graphs in runner"
    if f.free_memory is not None and f.free_memory < MIN_FREE_MEMORY:
        return (f"{f.free_memory:.0%} of the device's memory is free, under the {MIN_FREE_MEMORY:.0%} auto wants "
                "(CUDA-graph trees keep a memory pool of their own)")
    return None


_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _on_cuda(cfg: RunConfig) -> bool:
    acc = cfg.trainer.accelerator
    return acc in ("cuda", "gpu") or (acc == "auto" and torch.cuda.is_available())


def check_compiled_optimizer_scaler(cfg: RunConfig) -> str | None:
    return compiled_optimizer_with_scaler(cfg.compile.optimizer, str(cfg.trainer.precision).startswith("16-mixed"))


def check_cpu_offload_exclude(cfg: RunConfig) -> str | None:
    return offload_exclusions_lost(cfg.offload.strategy, cfg.offload.exclude, _on_cuda(cfg), cfg.compile.scope)


def check_step_backward_ddp(cfg: RunConfig) -> str | None:
    scope = cfg.compile.scope
    if not scope.row.under_ddp and cfg.trainer.is_distributed() and not cfg.trainer.sharded:
        return (f"compile.scope={scope.value} runs backward inside the forward call, which DDP's gradient reducer "
                "cannot synchronise. Use compile.scope=step (backward still runs compiled) with DDP.")
    return None


def check_compiled_autograd_ddp(cfg: RunConfig) -> str | None:
    if cfg.compile.compiled_autograd and cfg.trainer.is_distributed():
        return ("compile.compiled_autograd=true is not supported with DDP or FSDP in runner yet (DDP's C++ reducer "
                "hooks are opaque to compiled autograd; FSDP2's reduce-scatter hooks are untested under it). Set "
                "compile.compiled_autograd=false or train on one device.")
    return None


def check_mode_and_options(cfg: RunConfig) -> str | None:
    if cfg.compile.mode is not None and cfg.compile.options:
        return (f"compile.mode={cfg.compile.mode} and compile.options={dict(cfg.compile.options)} are both set; "
                "torch.compile takes one or the other. Move the mode's settings into compile.options or drop one.")
    return None


def check_fp8(cfg: RunConfig) -> str | None:
    codec = cfg.offload.strategy.row.codec
    if codec is not None and not hasattr(torch, codec.payload):
        return (f"offload={codec.name} needs torch.{codec.payload}, which torch {torch.__version__} lacks. "
                "Use offload=bf16 or upgrade torch.")
    return None


def check_memory_budget(cfg: RunConfig) -> str | None:
    b = cfg.offload.memory_budget
    if b is not None and not 0.0 < b < 1.0:
        return f"offload.memory_budget={b} must be in (0, 1) (a fraction of the activations kept), or null."
    return None


def check_backend(cfg: RunConfig) -> str | None:
    backend = cfg.compile.backend
    if not cfg.compile.scope.row.compiles:
        return None  # nothing is compiled
    known = torch.compiler.list_backends(exclude_tags=())
    if backend not in known:
        return (f"compile.backend={backend} is not a torch.compile backend. Use one of inductor, aot_eager, eager "
                f"(all registered: {', '.join(b for b in known if 'TESTING' not in b)}).")
    return None


def check_mode(cfg: RunConfig) -> str | None:
    mode = cfg.compile.mode
    if mode is not None and mode not in _MODES:
        return f"compile.mode={mode} is not an Inductor mode; use one of {', '.join(_MODES)} (or null)."
    if mode == "reduce-overhead":
        return ("compile.mode=reduce-overhead: CUDA graphs are configured by the cudagraphs group. Use "
                "cudagraphs=reduce_overhead (or cudagraphs.mode=reduce_overhead) and leave compile.mode unset.")
    return None


def check_fullgraph(cfg: RunConfig) -> str | None:
    c = cfg.compile
    if not c.fullgraph:
        return None
    if c.on_error is OnError["eager"]:
        return ("compile.fullgraph=true with compile.on_error=eager: under fullgraph torch raises on any graph break "
                "even when errors are suppressed, so there is no frame to fall back from. Set "
                "compile.fullgraph=false to allow eager fallbacks, or compile.on_error=raise to fail on breaks.")
    if not c.scope.row.compiles:
        return (f"compile.fullgraph=true with compile.scope={c.scope.value}: nothing is compiled, so fullgraph has no "
                "effect. Pick a scope (compile=step) or drop compile.fullgraph.")
    return None


def check_cudagraphs(cfg: RunConfig) -> str | None:
    c = cfg.compile
    facts = CudaGraphsFacts(on_cuda=_on_cuda(cfg), backend=c.backend, compiles=c.scope.row.compiles, scope=c.scope,
                            compile_mode=c.mode, shape=cfg.dynamic.policy, offload=cfg.offload.strategy,
                            accumulate_grad_batches=cfg.trainer.accumulate_grad_batches, sharded=cfg.trainer.sharded)
    return cudagraphs_refusal(cfg.cudagraphs.mode, facts)


def note_cudagraphs_on_cpu(cfg: RunConfig) -> str | None:
    # cudagraphs=auto is off on the CPU by design (the default): nothing to warn about.
    if cfg.cudagraphs.mode is CudaGraphMode.reduce_overhead and cfg.trainer.accelerator == "cpu":
        return (f"cudagraphs.mode={cfg.cudagraphs.mode.value} on trainer.accelerator=cpu: CUDA graphs need a CUDA "
                "device and are skipped here (reported as inactive). Use cudagraphs=disabled on CPU.")
    return None


# Models that call scaled_dot_product_attention, which torch tags as a random op (even at dropout_p=0): per-block
# checkpointing cannot recompute it in a forward-loss-backward graph.
SDPA_MODELS = ("runner.models.gpt.GPT",)


def _checkpointed_attention(cfg: RunConfig) -> str | None:
    """The model's ``_target_`` when per-block checkpointing wraps an attention torch tags as random."""
    target = getattr(cfg.model, "_target_", "")
    per_block = cfg.offload.strategy.row.keeps is Keeps.recomputed and cfg.offload.memory_budget is None
    return target if per_block and target in SDPA_MODELS else None


def check_step_backward_checkpoint(cfg: RunConfig) -> str | None:
    target = _checkpointed_attention(cfg)
    if target and cfg.compile.scope.row.backward_in_step and cfg.compile.backend != "eager":
        return (f"compile.scope=step_backward with offload=checkpoint on {target}: step_backward traces forward, "
                "loss and backward as one graph, and there torch cannot recompute random ops inside a "
                "checkpointed block (its attention, scaled_dot_product_attention, is tagged random even at "
                "dropout 0). Use compile.scope=step with offload=checkpoint (the partitioner handles random ops "
                "there), or offload=checkpoint_budget, bf16 or fp8 with step_backward.")
    return None


def check_cpp_wrapper_checkpoint(cfg: RunConfig) -> str | None:
    target = _checkpointed_attention(cfg)
    if (target and cfg.compile.options.get("cpp_wrapper") and cfg.compile.backend == "inductor"
            and cfg.compile.scope.row.compiles):
        return (f"Inductor's cpp_wrapper option (compile.options) with offload=checkpoint on {target}: a "
                "checkpointed block saves and restores the random state around its attention "
                "(scaled_dot_product_attention is tagged "
                "random), and Inductor's C++ wrapper cannot generate that step (run_and_save_rng_state). Use "
                "offload=checkpoint_budget (the partitioner recomputes without it), or "
                "++compile.options.cpp_wrapper=false.")
    return None


def check_background(cfg: RunConfig) -> str | None:
    """An explicit compile process beside the run where there is none to run (auto decides for itself)."""
    b = cfg.compile.background
    if b in (Background.auto, Background.disabled):
        return None
    if not cfg.compile.scope.row.compiles:
        return (f"compile.background={b.value} with compile.scope={cfg.compile.scope.value}: nothing is compiled, "
                "so there is no compile to run beside the run. Drop compile.background or choose a scope, e.g. "
                "compile=step.")
    if cfg.trainer.is_distributed():
        return (f"compile.background={b.value} with several processes (DDP or FSDP): every rank would have to switch "
                "to the compiled step at the same step, which runner does not coordinate yet. Use "
                "compile.background=disabled (auto compiles in the first step there).")
    return None


def remote_cache_error(url: str, trust: CacheTrust = CacheTrust.signed) -> str | None:
    """Why ``compile.cache`` cannot be used (a malformed address, no ``redis``, no usable secret where entries must be
    signed), else None; the address shown without its password."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    db = parts.path.strip("/")
    shown = redact_url(url) if port is not None else f"{parts.scheme}://{parts.hostname or ''}..."
    if parts.scheme not in ("redis", "rediss") or not parts.hostname or port is None or (db and not db.isdigit()):
        return (f"compile.cache={shown} is not a Redis address: write redis://HOST:PORT or redis://HOST:PORT/DB "
                "(rediss:// for TLS), e.g. compile.cache=redis://127.0.0.1:6379, or drop compile.cache to compile "
                "with the local cache only.")
    import importlib.util

    if importlib.util.find_spec("redis") is None:
        return (f"compile.cache={shown} needs the redis client package, which is not installed: pip install "
                "'runner[cache]' (or pip install redis), or drop compile.cache.")
    secret, secret_problem = read_secret()
    if secret_problem:
        return f"compile.cache={shown}: {secret_problem}"
    if secret is None and trust is CacheTrust.signed:
        return (f"compile.cache={shown} with no secret to sign what the processes share: torch's entries are "
                "pickles it unpickles and code it runs, so unsigned, anyone who can write to the server runs code "
                f"in every process that uses it. Set {SECRET_ENV} to a random string of at least 16 bytes "
                f"(`export {SECRET_ENV}=$({SECRET_HINT})`), or {SECRET_FILE_ENV} to a file holding it; every "
                "process of the cluster (each rank, node and sweep job) needs the same one. Or accept torch's "
                "unsigned sharing, trusting everyone who can write to the server, with "
                "compile.cache_trust=unsigned (docs/compile-cache.md).")
    return None


def check_remote_cache(cfg: RunConfig) -> str | None:
    return remote_cache_error(cfg.compile.cache, cfg.compile.cache_trust) if cfg.compile.cache else None


def check_buckets(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    if not d.policy.row.takes_buckets:
        return None
    if not d.buckets or any(b <= 0 for b in d.buckets):
        return (f"dynamic.policy=bucket needs positive dynamic.buckets (got {list(d.buckets)}), "
                "e.g. dynamic.buckets=[64,128,256,512].")
    seq_len = getattr(cfg.data, "seq_len", None)
    if seq_len is not None and max(d.buckets) < seq_len:
        return (f"dynamic.buckets={list(d.buckets)}: the largest bucket is below data.seq_len={seq_len}, so the "
                f"longest sequences would not fit. Add a bucket >= {seq_len}.")
    return None


def check_dynamic_bounds(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    if d.min < 0 or (d.max is not None and d.max <= d.min):
        return f"dynamic.min={d.min}, dynamic.max={d.max}: need 0 <= min < max (or max=null)."
    if d.recompile_limit < 1:
        return f"dynamic.recompile_limit={d.recompile_limit} must be at least 1."
    return None


def check_bucket_fits(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    if not d.policy.row.takes_buckets or not d.buckets or any(b <= 0 for b in d.buckets):
        return None
    if len(set(d.buckets)) > d.recompile_limit:
        return (f"dynamic.buckets has {len(set(d.buckets))} buckets but dynamic.recompile_limit={d.recompile_limit}: "
                "each bucket compiles its own graph, and past the limit torch silently runs eagerly. Raise "
                f"dynamic.recompile_limit to >= {len(set(d.buckets))} or use fewer buckets.")
    seq_len, block = getattr(cfg.data, "seq_len", None), getattr(cfg.model, "block_size", None)
    if isinstance(seq_len, int) and isinstance(block, int):
        longest = min((b for b in d.buckets if b >= seq_len), default=None)
        if longest is not None and longest > block:
            return (f"dynamic.buckets={list(d.buckets)} pads data.seq_len={seq_len} up to {longest} tokens, beyond "
                    f"model.block_size={block} (the position embedding). Add a bucket equal to {seq_len}.")
    return None


def check_shape_marks(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    row = d.policy.row
    if not row.marks_dims:
        return None
    if not d.dims:
        return f"dynamic.policy={d.policy.value} with dynamic.dims=[]: nothing would be marked. Use dynamic.dims=[1]."
    seq_len = getattr(cfg.data, "seq_len", None)
    if d.max is not None and isinstance(seq_len, int) and d.max < seq_len:
        return (f"dynamic.max={d.max} is below data.seq_len={seq_len}: longer batches would break the bound and "
                f"recompile. Set dynamic.max >= {seq_len} or null.")
    if d.min < row.min_length:
        return (f"dynamic.policy={d.policy.value} with dynamic.min={d.min}: without a lower bound of "
                f"{row.min_length}, causal attention cannot rule out an empty sequence, graph-breaks and falls back "
                f"to eager. Use dynamic.min={row.min_length}.")
    if row.mark is Mark.unbacked and runtime.unbacked_bounds_unsupported():
        return (f"dynamic.policy=unbacked on torch {torch.__version__}: its mark_unbacked takes no lower bound (torch "
                "2.13 and later do), so causal attention cannot rule out an empty sequence, graph-breaks and falls "
                "back to eager. Use dynamic=dynamic (one graph for every length), or torch>=2.13.")
    return None


def check_after_warmup(cfg: RunConfig) -> str | None:
    d = cfg.dynamic
    if d.after_warmup is not AfterWarmup.none and d.warmup_steps < 1:
        return (f"dynamic.after_warmup={d.after_warmup.value} with dynamic.warmup_steps={d.warmup_steps}: the stance "
                "would apply to the very first compile. Give at least 1 warm-up step.")
    return None


# Lightning's ModelParallelStrategy takes these (trainer/connectors/accelerator_connector.py,
# ``mp_precision_supported``); fp16's gradient scaler cannot unscale sharded (DTensor) gradients.
FSDP_PRECISIONS = ("32-true", "bf16-mixed", "bf16-true")


def check_fsdp_scope(cfg: RunConfig) -> str | None:
    if cfg.trainer.sharded and not cfg.compile.scope.row.under_fsdp:
        return (f"compile.scope={cfg.compile.scope.value} with trainer.distributed=fsdp: under FSDP2 runner compiles "
                "each block in place before sharding it, so each block's all-gather and reduce-scatter hooks run "
                "eagerly around its graph (torchtitan's order); compiling the whole step or model would trace "
                "across those hooks, which runner neither supports nor tests. Use compile=blocks (or compile=eager).")
    return None


def check_fsdp_precision(cfg: RunConfig) -> str | None:
    p = cfg.trainer.precision
    if cfg.trainer.sharded and p not in FSDP_PRECISIONS:
        return (f"trainer.precision={p} with trainer.distributed=fsdp: Lightning's FSDP2 strategy takes "
                f"{', '.join(FSDP_PRECISIONS)} (a float16 gradient scaler cannot unscale sharded gradients). "
                "Use trainer.precision=bf16-mixed (FSDP gathers parameters in bf16, reduces in fp32) or 32-true.")
    return None


CHECKS = [
    check_remote_cache,
    check_compiled_optimizer_scaler,
    check_cpu_offload_exclude,
    check_background,
    check_step_backward_ddp,
    check_step_backward_checkpoint,
    check_cpp_wrapper_checkpoint,
    check_compiled_autograd_ddp,
    check_mode_and_options,
    check_buckets,
    check_dynamic_bounds,
    check_bucket_fits,
    check_shape_marks,
    check_after_warmup,
    check_fp8,
    check_memory_budget,
    check_backend,
    check_mode,
    check_fullgraph,
    check_cudagraphs,
    check_fsdp_scope,
    check_fsdp_precision,
]

# Said once per run, by the job that runs it (runner.config.composing.loading.load).
NOTES = [note_cudagraphs_on_cpu]
