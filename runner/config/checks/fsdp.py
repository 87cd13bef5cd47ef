"""Checks of ``trainer.distributed=fsdp`` (FSDP2): what cannot work on sharded parameters is refused
before anything runs, each with the key and the fix. ``runner.config.checks.validate`` runs them."""

from __future__ import annotations

from runner.config.schema import CudaGraphMode, RunConfig

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


def check_fsdp_cudagraphs(cfg: RunConfig) -> str | None:
    # cudagraphs=auto stays off under FSDP by itself (runner.config.rules.stack.cudagraphs_decision): nothing to refuse.
    if cfg.trainer.sharded and cfg.cudagraphs.mode is CudaGraphMode.reduce_overhead:
        return ("cudagraphs=reduce_overhead with trainer.distributed=fsdp: FSDP2 allocates and frees the gathered "
                "parameters around every block, outside the compiled graphs, so no static addresses exist to "
                "record. Use cudagraphs=disabled with FSDP, or trainer.distributed=ddp.")
    return None


def check_fsdp_precision(cfg: RunConfig) -> str | None:
    p = cfg.trainer.precision
    if cfg.trainer.sharded and p not in FSDP_PRECISIONS:
        return (f"trainer.precision={p} with trainer.distributed=fsdp: Lightning's FSDP2 strategy takes "
                f"{', '.join(FSDP_PRECISIONS)} (a float16 gradient scaler cannot unscale sharded gradients). "
                "Use trainer.precision=bf16-mixed (FSDP gathers parameters in bf16, reduces in fp32) or 32-true.")
    return None


CHECKS = [check_fsdp_scope, check_fsdp_cudagraphs, check_fsdp_precision]
