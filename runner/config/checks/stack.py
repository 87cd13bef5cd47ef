"""Cross-group checks of the compile stack's config: ``compile``, ``dynamic``, ``offload``,
``cudagraphs`` and how they meet the trainer. Each check is a small pure function of the typed
``RunConfig`` returning one message (key, value, fix) or None; ``runner.config.checks.validate`` runs them.
"""

from __future__ import annotations

import torch

from runner.config.cache_secret import SECRET_ENV, SECRET_FILE_ENV, SECRET_HINT, read_secret, redact_url
from runner.config.checks import dynamic
from runner.config.rules import stack as stack_rules
from runner.config.schema import Background, CacheTrust, CudaGraphMode, OnError, RunConfig
from runner.config.schema.options import Keeps

_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

def _on_cuda(cfg: RunConfig) -> bool:
    acc = cfg.trainer.accelerator
    return acc in ("cuda", "gpu") or (acc == "auto" and torch.cuda.is_available())


def check_compiled_optimizer_scaler(cfg: RunConfig) -> str | None:
    scaler = str(cfg.trainer.precision).startswith("16-mixed")
    return stack_rules.compiled_optimizer_with_scaler(cfg.compile.optimizer, scaler)


def check_cpu_offload_exclude(cfg: RunConfig) -> str | None:
    """Under a scope that compiles the whole step or model every excluded module runs inside compiled code; for
    ``scope=blocks`` the stack decides once it sees the model's module names (the same rule)."""
    o = cfg.offload
    return stack_rules.offload_exclusions_lost(o.strategy, o.exclude, _on_cuda(cfg), cfg.compile.scope)


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


def check_cudagraphs_unbacked(cfg: RunConfig) -> str | None:
    policy = cfg.dynamic.policy
    if cfg.cudagraphs.mode is CudaGraphMode.reduce_overhead and not policy.row.cudagraphs:
        return (f"cudagraphs=reduce_overhead with dynamic.policy={policy.value}: a CUDA graph records fixed sizes, "
                "and unbacked sizes are unknown until run time. Use dynamic=bucket (one graph per bucket) or "
                "cudagraphs=disabled.")
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


def check_cudagraphs_combinations(cfg: RunConfig) -> str | None:
    """CUDA graphs with what cannot work beside them: refused before anything runs."""
    if cfg.cudagraphs.mode is not CudaGraphMode.reduce_overhead:
        return None
    if problem := stack_rules.cudagraphs_with_accumulation(True, cfg.trainer.accumulate_grad_batches):
        return problem
    if not cfg.compile.scope.row.compiles:
        return (f"cudagraphs=reduce_overhead with compile.scope={cfg.compile.scope.value}: CUDA graphs record "
                "compiled graphs, and nothing is compiled. Pick a scope (compile=step) or use cudagraphs=disabled.")
    if cfg.compile.backend != "inductor":
        return (f"cudagraphs=reduce_overhead with compile.backend={cfg.compile.backend}: CUDA-graph trees are "
                "Inductor's; other backends would drop them silently. Use compile.backend=inductor or "
                "cudagraphs=disabled.")
    if not cfg.offload.strategy.row.cudagraphs:
        return (f"cudagraphs=reduce_overhead with offload={cfg.offload.strategy.value}: offloading to host memory "
                "runs stream and event calls in eager saved-tensor hooks, which a CUDA graph cannot capture or "
                "replay. Use offload=bf16 or offload=checkpoint (both work under CUDA graphs), or cudagraphs=disabled.")
    if cfg.compile.mode not in (None, "max-autotune"):
        return (f"cudagraphs=reduce_overhead with compile.mode={cfg.compile.mode}: the cudagraphs group sets the "
                "mode (reduce-overhead). Leave compile.mode unset, or use compile.mode=max-autotune (which "
                "includes CUDA graphs).")
    return None


def warn_cudagraphs_on_cpu(cfg: RunConfig) -> str | None:
    # cudagraphs=auto is off on the CPU by design (the default): nothing to warn about.
    if cfg.cudagraphs.mode is CudaGraphMode.reduce_overhead and cfg.trainer.accelerator == "cpu":
        return (f"cudagraphs.mode={cfg.cudagraphs.mode.value} on trainer.accelerator=cpu: CUDA graphs need a CUDA "
                "device and are skipped here (reported as inactive). Use cudagraphs=disabled on CPU.")
    return None


SDPA_MODELS = ("runner.models.gpt.GPT",)
"""Models that call ``scaled_dot_product_attention``, which torch tags as a random op (even at
``dropout_p=0``): per-block checkpointing cannot recompute it in a forward-loss-backward graph."""


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
    """Why ``compile.cache`` cannot be used (a malformed address, no ``redis`` client, a secret that is set but
    unusable, or none where entries must be signed), else None. The address is shown without its password."""
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
    check_cudagraphs_unbacked,
    *dynamic.CHECKS,
    check_fp8,
    check_memory_budget,
    check_backend,
    check_mode,
    check_fullgraph,
    check_cudagraphs_combinations,
]


WARNINGS = [warn_cudagraphs_on_cpu]
