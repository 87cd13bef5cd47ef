"""The summary's sections and which figures each shows (the console summary, ``report.md``, the sweep summary)."""

from __future__ import annotations

from runner.metrics import TRAIN_METRICS, VAL_METRICS, Metric, metric


def _rows(*keys: str) -> tuple[Metric, ...]:
    """The definitions of ``keys``, in order: rows of a table, each with its label."""
    rows = tuple(metric(key) for key in keys)
    unlabelled = [f.key for f in rows if not f.label.strip()]
    if unlabelled:
        raise ValueError(f"figures without a label cannot be rows of a table: {unlabelled}")
    return rows


# The summary's sections and rows, in order: the console table, ``report.md`` and docs/report.md show them.
SECTIONS: tuple[tuple[str, tuple[Metric, ...]], ...] = (
    ("run", _rows("run/hub", "run/steps", "run/resumed_at_step", "run/wall_s", "train/loss", "val/loss", "val/bpb",
                  "val/accuracy", "data/unigram_bpb", "run/lr_schedule", "run/export", "run/pushed_to")),
    ("fine-tuning", _rows("peft/method", "peft/targets", "peft/trainable_params", "peft/total_params",
                          "peft/trainable_pct", "peft/optimizer_state_bytes", "peft/base_weight_bytes")),
    ("preference", _rows("objective/loss", "objective/beta", "objective/gamma", "objective/label_smoothing",
                         "objective/reference", "objective/reference_bytes", "objective/reference_cache", *VAL_METRICS,
                         *TRAIN_METRICS)),
    ("loss", _rows("loss/chunked", "loss/reason", "loss/chunks", "loss/chunk_rows", "loss/logits_gib")),
    ("data", _rows("data/source", "data/changed", "data/files", "data/rows", "data/tokens", "data/train_sequences",
                   "data/val_sequences", "data/split", "data/truncated_rows", "data/truncated_pct", "data/cut_part",
                   "data/dropped_rows", "data/dropped_by", "data/null_rows", "data/label_counts", "data/format",
                   "data/examples", "data/pairs", "data/prompt_tokens", "data/answer_tokens", "data/completion_tokens",
                   "data/loss_tokens", "data/roles", "data/turns_trained", "data/turns_cut", "data/turns_prompt",
                   "data/packs", "data/examples_per_pack", "data/packing_padding_pct")),
    ("compile stack", _rows("compile/scope", "compile/options", "compile/optimizer", "dynamic/policy",
                            "data/batch_shape", "dynamic/padding_waste_pct", "offload/strategy", "offload/reduction_x",
                            "offload/grad_rel_error", "cudagraphs/decision", "cudagraphs/active",
                            "cudagraphs/recordings", "cudagraphs/rerecordings", "cudagraphs/replay_steps",
                            "cudagraphs/partitions_graphed", "cudagraphs/optimizer_recordings",
                            "cudagraphs/optimizer_replays")),
    ("what compiling did", _rows("compile/frames", "compile/graphs", "compile/recompiles", "compile/graph_breaks",
                                 "compile/guards_total", "compile/guards_max", "compile/time_s",
                                 "compile/time_before_resume_s", "compile/dynamo_s", "compile/aot_autograd_s",
                                 "compile/inductor_s", "compile/cache_hits", "compile/cache_misses",
                                 "compile/remote_cache_status", "compile/remote_cache_hits",
                                 "compile/remote_cache_misses", "compile/remote_entries_rejected",
                                 "compile/remote_kernels_fetched", "compile/remote_kernels_rejected",
                                 "compile/cudagraph_skips", "compile/fallbacks", "compile/demotions",
                                 "compile/optimizer_compiled_steps", "compile/optimizer_eager_steps")),
    ("compile beside the run", _rows("compile/background", "compile/background_outcome", "compile/background_room",
                                     "compile/background_s", "compile/eager_steps_beside",
                                     "compile/eager_step_beside_ms", "perf/beside_cost_s",
                                     "compile/background_speedup_x", "compile/after_switch_speedup_x",
                                     "compile/background_reverted")),
    ("what compiling bought", _rows("perf/eager_step_ms", "perf/compiled_step_ms", "perf/speedup_x",
                                    "perf/speedup_steps", "perf/break_even_step", "perf/step_ms",
                                    "perf/host_ms_per_step", "perf/device_busy", "perf/left_out_steps",
                                    "perf/left_out_step_ms", "perf/recording_steps", "perf/examples_per_s",
                                    "perf/loss_tokens_per_s", "perf/samples_per_s", "perf/tokens_per_s",
                                    "perf/tflop_per_step", "perf/mfu", "perf/peak_tflops", "perf/peak_source",
                                    "memory/peak_gib", "trace/html")),
)

FIGURES: dict[str, Metric] = {f.key: f for _, figures in SECTIONS for f in figures}
# Figures of other tables (the sweep summary, runner tune's): defined here too, shown in their legends.
FIGURES.update({f.key: f for f in _rows("tune/us_per_token", "tune/speedup_vs_eager_x")})

# Rows whose definitions the console prints under its table (the rest: report.md, docs/report.md).
TIMING_LEGEND = ("speedup [x]", "break-even step", "step, last 50 [ms]")
