"""The summary's sections and which figures each shows (the console summary, ``report.md``, the sweep summary)."""

from __future__ import annotations

from runner.figures import objective as fo
from runner.figures import peft as fp
from runner.figures import run_preference as fpref
from runner.figures.compile_background import (
    COMPILE_AFTER_SWITCH_SPEEDUP_X,
    COMPILE_BACKGROUND,
    COMPILE_BACKGROUND_OUTCOME,
    COMPILE_BACKGROUND_REVERTED,
    COMPILE_BACKGROUND_ROOM,
    COMPILE_BACKGROUND_S,
    COMPILE_BACKGROUND_SPEEDUP_X,
    COMPILE_EAGER_STEP_BESIDE_MS,
    COMPILE_EAGER_STEPS_BESIDE,
)
from runner.figures.compile_caches import (
    COMPILE_CACHE_HITS,
    COMPILE_CACHE_MISSES,
    COMPILE_REMOTE_CACHE_HITS,
    COMPILE_REMOTE_CACHE_MISSES,
    COMPILE_REMOTE_CACHE_STATUS,
    COMPILE_REMOTE_ENTRIES_REJECTED,
    COMPILE_REMOTE_KERNELS_FETCHED,
    COMPILE_REMOTE_KERNELS_REJECTED,
)
from runner.figures.compile_plan import (
    COMPILE_OPTIMIZER,
    COMPILE_OPTIMIZER_COMPILED_STEPS,
    COMPILE_OPTIMIZER_EAGER_STEPS,
    COMPILE_OPTIONS,
    COMPILE_SCOPE,
)
from runner.figures.compile_work import (
    COMPILE_AOT_AUTOGRAD_S,
    COMPILE_CUDAGRAPH_SKIPS,
    COMPILE_DEMOTIONS,
    COMPILE_DYNAMO_S,
    COMPILE_FALLBACKS,
    COMPILE_FRAMES,
    COMPILE_GRAPH_BREAKS,
    COMPILE_GRAPHS,
    COMPILE_GUARDS_MAX,
    COMPILE_GUARDS_TOTAL,
    COMPILE_INDUCTOR_S,
    COMPILE_RECOMPILES,
    COMPILE_TIME_BEFORE_RESUME_S,
    COMPILE_TIME_S,
)
from runner.figures.cudagraphs import (
    CUDAGRAPHS_ACTIVE,
    CUDAGRAPHS_DECISION,
    CUDAGRAPHS_OPTIMIZER_RECORDINGS,
    CUDAGRAPHS_OPTIMIZER_REPLAYS,
    CUDAGRAPHS_PARTITIONS_GRAPHED,
    CUDAGRAPHS_RECORDINGS,
    CUDAGRAPHS_REPLAY_STEPS,
    CUDAGRAPHS_RERECORDINGS,
)
from runner.figures.data import (
    DATA_ANSWER_TOKENS,
    DATA_BATCH_SHAPE,
    DATA_CHANGED,
    DATA_COMPLETION_TOKENS,
    DATA_CUT_PART,
    DATA_DROPPED_BY,
    DATA_DROPPED_ROWS,
    DATA_EXAMPLES,
    DATA_EXAMPLES_PER_PACK,
    DATA_FILES,
    DATA_FORMAT,
    DATA_LABEL_COUNTS,
    DATA_LOSS_TOKENS,
    DATA_NULL_ROWS,
    DATA_PACKING_PADDING_PCT,
    DATA_PACKS,
    DATA_PAIRS,
    DATA_PROMPT_TOKENS,
    DATA_ROLES,
    DATA_ROWS,
    DATA_SOURCE,
    DATA_SPLIT,
    DATA_TOKENS,
    DATA_TRAIN_SEQUENCES,
    DATA_TRUNCATED_PCT,
    DATA_TRUNCATED_ROWS,
    DATA_TURNS_CUT,
    DATA_TURNS_PROMPT,
    DATA_TURNS_TRAINED,
    DATA_UNIGRAM_BPB,
    DATA_VAL_SEQUENCES,
)
from runner.figures.dynamic import DYNAMIC_PADDING_WASTE_PCT, DYNAMIC_POLICY
from runner.figures.loss import LOSS_CHUNK_ROWS, LOSS_CHUNKED, LOSS_CHUNKS, LOSS_LOGITS_GIB, LOSS_REASON
from runner.figures.memory import MEMORY_PEAK_GIB
from runner.figures.offload import OFFLOAD_GRAD_REL_ERROR, OFFLOAD_REDUCTION_X, OFFLOAD_STRATEGY
from runner.figures.perf import (
    PERF_BESIDE_COST_S,
    PERF_BREAK_EVEN_STEP,
    PERF_COMPILED_STEP_MS,
    PERF_DEVICE_BUSY,
    PERF_EAGER_STEP_MS,
    PERF_EXAMPLES_PER_S,
    PERF_HOST_MS_PER_STEP,
    PERF_LEFT_OUT_STEP_MS,
    PERF_LEFT_OUT_STEPS,
    PERF_LOSS_TOKENS_PER_S,
    PERF_MFU,
    PERF_PEAK_SOURCE,
    PERF_PEAK_TFLOPS,
    PERF_RECORDING_STEPS,
    PERF_SAMPLES_PER_S,
    PERF_SPEEDUP_STEPS,
    PERF_SPEEDUP_X,
    PERF_STEP_MS,
    PERF_TFLOP_PER_STEP,
    PERF_TOKENS_PER_S,
)
from runner.figures.registry import Figure, figure
from runner.figures.run import (
    RUN_EXPORT,
    RUN_HUB,
    RUN_LR_SCHEDULE,
    RUN_PUSHED_TO,
    RUN_RESUMED_AT_STEP,
    RUN_STEPS,
    RUN_WALL_S,
    TRAIN_LOSS,
    VAL_ACCURACY,
    VAL_BPB,
    VAL_LOSS,
)
from runner.figures.trace import TRACE_HTML
from runner.figures.tune import TUNE_SPEEDUP_VS_EAGER_X, TUNE_US_PER_TOKEN


def _rows(*keys: str) -> tuple[Figure, ...]:
    """The definitions of ``keys``, in order: rows of a table, each with its label."""
    rows = tuple(figure(key) for key in keys)
    unlabelled = [f.key for f in rows if not f.label.strip()]
    if unlabelled:
        raise ValueError(f"figures without a label cannot be rows of a table: {unlabelled}")
    return rows


# The summary's sections and rows, in order: the console table, ``report.md`` and docs/report.md show them.
SECTIONS: tuple[tuple[str, tuple[Figure, ...]], ...] = (
    ("run", _rows(RUN_HUB, RUN_STEPS, RUN_RESUMED_AT_STEP, RUN_WALL_S, TRAIN_LOSS, VAL_LOSS, VAL_BPB, VAL_ACCURACY,
                  DATA_UNIGRAM_BPB, RUN_LR_SCHEDULE, RUN_EXPORT, RUN_PUSHED_TO)),
    ("fine-tuning", _rows(fp.PEFT_METHOD, fp.PEFT_TARGETS, fp.PEFT_TRAINABLE_PARAMS, fp.PEFT_TOTAL_PARAMS,
                          fp.PEFT_TRAINABLE_PCT, fp.PEFT_OPTIMIZER_STATE_BYTES, fp.PEFT_BASE_WEIGHT_BYTES)),
    ("preference", _rows(fo.OBJECTIVE_LOSS, fo.OBJECTIVE_BETA, fo.OBJECTIVE_GAMMA, fo.OBJECTIVE_LABEL_SMOOTHING,
                         fo.OBJECTIVE_REFERENCE, fo.OBJECTIVE_REFERENCE_BYTES,
                         fo.OBJECTIVE_REFERENCE_CACHE, *fpref.VAL_METRICS, *fpref.TRAIN_METRICS)),
    ("loss", _rows(LOSS_CHUNKED, LOSS_REASON, LOSS_CHUNKS, LOSS_CHUNK_ROWS, LOSS_LOGITS_GIB)),
    ("data", _rows(DATA_SOURCE, DATA_CHANGED, DATA_FILES, DATA_ROWS, DATA_TOKENS, DATA_TRAIN_SEQUENCES,
                   DATA_VAL_SEQUENCES, DATA_SPLIT, DATA_TRUNCATED_ROWS, DATA_TRUNCATED_PCT, DATA_CUT_PART,
                   DATA_DROPPED_ROWS, DATA_DROPPED_BY, DATA_NULL_ROWS, DATA_LABEL_COUNTS, DATA_FORMAT, DATA_EXAMPLES,
                   DATA_PAIRS, DATA_PROMPT_TOKENS, DATA_ANSWER_TOKENS, DATA_COMPLETION_TOKENS, DATA_LOSS_TOKENS,
                   DATA_ROLES, DATA_TURNS_TRAINED, DATA_TURNS_CUT, DATA_TURNS_PROMPT, DATA_PACKS,
                   DATA_EXAMPLES_PER_PACK, DATA_PACKING_PADDING_PCT)),
    ("compile stack", _rows(COMPILE_SCOPE, COMPILE_OPTIONS, COMPILE_OPTIMIZER, DYNAMIC_POLICY, DATA_BATCH_SHAPE,
                            DYNAMIC_PADDING_WASTE_PCT, OFFLOAD_STRATEGY, OFFLOAD_REDUCTION_X, OFFLOAD_GRAD_REL_ERROR,
                            CUDAGRAPHS_DECISION, CUDAGRAPHS_ACTIVE, CUDAGRAPHS_RECORDINGS, CUDAGRAPHS_RERECORDINGS,
                            CUDAGRAPHS_REPLAY_STEPS, CUDAGRAPHS_PARTITIONS_GRAPHED, CUDAGRAPHS_OPTIMIZER_RECORDINGS,
                            CUDAGRAPHS_OPTIMIZER_REPLAYS)),
    ("what compiling did", _rows(COMPILE_FRAMES, COMPILE_GRAPHS, COMPILE_RECOMPILES, COMPILE_GRAPH_BREAKS,
                                 COMPILE_GUARDS_TOTAL, COMPILE_GUARDS_MAX, COMPILE_TIME_S, COMPILE_TIME_BEFORE_RESUME_S,
                                 COMPILE_DYNAMO_S,
                                 COMPILE_AOT_AUTOGRAD_S, COMPILE_INDUCTOR_S, COMPILE_CACHE_HITS, COMPILE_CACHE_MISSES,
                                 COMPILE_REMOTE_CACHE_STATUS, COMPILE_REMOTE_CACHE_HITS, COMPILE_REMOTE_CACHE_MISSES,
                                 COMPILE_REMOTE_ENTRIES_REJECTED, COMPILE_REMOTE_KERNELS_FETCHED,
                                 COMPILE_REMOTE_KERNELS_REJECTED, COMPILE_CUDAGRAPH_SKIPS, COMPILE_FALLBACKS,
                                 COMPILE_DEMOTIONS,
                                 COMPILE_OPTIMIZER_COMPILED_STEPS, COMPILE_OPTIMIZER_EAGER_STEPS)),
    ("compile beside the run", _rows(COMPILE_BACKGROUND, COMPILE_BACKGROUND_OUTCOME, COMPILE_BACKGROUND_ROOM,
                                     COMPILE_BACKGROUND_S,
                                     COMPILE_EAGER_STEPS_BESIDE, COMPILE_EAGER_STEP_BESIDE_MS, PERF_BESIDE_COST_S,
                                     COMPILE_BACKGROUND_SPEEDUP_X, COMPILE_AFTER_SWITCH_SPEEDUP_X,
                                     COMPILE_BACKGROUND_REVERTED)),
    ("what compiling bought", _rows(PERF_EAGER_STEP_MS, PERF_COMPILED_STEP_MS, PERF_SPEEDUP_X, PERF_SPEEDUP_STEPS,
                                    PERF_BREAK_EVEN_STEP, PERF_STEP_MS, PERF_HOST_MS_PER_STEP, PERF_DEVICE_BUSY,
                                    PERF_LEFT_OUT_STEPS, PERF_LEFT_OUT_STEP_MS, PERF_RECORDING_STEPS,
                                    PERF_EXAMPLES_PER_S, PERF_LOSS_TOKENS_PER_S,
                                    PERF_SAMPLES_PER_S, PERF_TOKENS_PER_S, PERF_TFLOP_PER_STEP,
                                    PERF_MFU, PERF_PEAK_TFLOPS, PERF_PEAK_SOURCE, MEMORY_PEAK_GIB, TRACE_HTML)),
)

FIGURES: dict[str, Figure] = {f.key: f for _, figures in SECTIONS for f in figures}
# Figures of other tables (the sweep summary, runner tune's): defined here too, shown in their legends.
FIGURES.update({f.key: f for f in _rows(TUNE_US_PER_TOKEN, TUNE_SPEEDUP_VS_EAGER_X)})

# Rows whose definitions the console prints under its table (the rest: report.md, docs/report.md).
TIMING_LEGEND = ("speedup [x]", "break-even step", "step, last 50 [ms]")
