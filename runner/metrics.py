"""Every metric runner reports: its key (``namespace/name_unit``), its label where a table shows it, and
what it means; and the one protocol of whatever reports them (``figures()``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

KEY = re.compile(r"^[a-z]+(/[a-z0-9_]+)+$")  # per-rank metrics nest a key under ranks/


@dataclass(frozen=True)
class Metric:
    key: str
    label: str  # "" where no table shows it
    meaning: str


_ROWS: tuple[tuple[str, str, str], ...] = (

    # What the run was and where it ended
    ("run/name", "", "the run's name (the config's `name`)"),
    ("run/recipe", "", "the recipe the run was composed from (the config's `recipe`)"),
    ("run/steps", "steps", "optimizer steps trained (a resumed run counts from the first run's start)"),
    ("run/resumed_at_step", "resumed at step", "the step a resumed run went on from (its checkpoint's); the report "
     "covers the whole run: steps and compile time count both parts, val/* is the resumed part's; absent when the run "
     "started at step 0"),
    ("run/wall_s", "wall time [s]", "seconds in trainer.fit in this process (a resumed run: since the resume): "
     "training, validation, compiles"),
    ("run/params", "", "parameters of the module trained"),
    ("run/device", "", "the device the strategy trained on (its root device)"),
    ("run/precision", "", "the precision the run trained in (trainer.precision)"),
    ("run/torch", "", "torch's version"),
    ("run/last_checkpoint", "", "the run's last checkpoint (null: none was written)"),
    ("run/interrupted_by", "", "the signal that stopped the run (SIGINT, SIGTERM); absent when none did"),
    ("run/interrupted_at_step", "", "the step at which that signal stopped the run and its checkpoint was written"),
    ("run/signal_after_end", "", "a signal (SIGINT, SIGTERM) that arrived after the last training step, too late to "
     "stop anything: the run had finished and ended as it would have; absent when none did"),
    ("run/lr_schedule", "LR schedule at resume", "what a resume that asked for another trainer.max_steps did to the "
     "learning-rate schedule (scheduler.on_resume: keep or stretch); absent when none did"),
    ("run/hub", "Hub sources", "each Hugging Face Hub name the run read: the setting, the name, model or dataset, "
     "the revision asked, the commit it resolved to, its files and bytes, the setting's value pinned to that commit "
     "(and a data set's config and split); absent when every path was local"),
    ("run/export", "model export", "the directory the trained model was exported to at the end of the fit "
     "(<run_dir>/model), or why it was not"),
    ("run/pushed_to", "pushed to the Hub", "where after.push_to_hub pushed the export at the end of the run: the "
     "Hugging Face Hub repo and the commit of the push, or why it failed and the command that pushes it again; absent "
     "when after.push_to_hub is unset"),
    ("run/sample", "", "text the trained causal LM wrote at the end of the fit (after.sample_tokens)"),
    ("train/loss", "train loss", "the last logged training loss"),
    ("val/loss", "val loss", "loss over the validation batches at the last validation"),
    ("val/bpb", "val bits per byte", "the validation loss in bits per byte of text (byte-level text only)"),
    ("val/accuracy", "val accuracy", "share of the validation targets predicted (classification data only)"),

    # What the run read
    ("data/source", "source", "what data.path named: its file, its files (how many, of which format), or the Python "
     "stdlib source"),
    ("data/files", "files", "files read (after data.max_bytes)"),
    ("data/rows", "rows / documents", "rows (tables) or documents (text files) read, validation's included"),
    ("data/tokens", "tokens", "token ids those rows became (bytes of byte-level text), validation's included"),
    ("data/train_sequences", "train sequences", "training sequences: packed windows, document chunks or rows"),
    ("data/val_sequences", "val sequences", "validation sequences, none of them in training"),
    ("data/split", "validation", "how validation was chosen: data.val_path, a seeded split by document or row, or "
     "the last windows of a single document"),
    ("data/truncated_rows", "rows cut at seq_len", "rows longer than data.seq_len tokens, cut there (a warning when "
     "more than 10%)"),
    ("data/truncated_pct", "  share cut [%]", "those rows as a share of the rows used"),
    ("data/dropped_rows", "left out", "rows or files a cap or filter left out (data.max_bytes, data.max_examples, "
     "data.min_len, a null text)"),
    ("data/dropped_by", "  by", "what left them out, each setting with its count"),
    ("data/null_rows", "  null texts", "rows whose text is null (missing), left out: no empty document, no row "
     "blamed on data.min_len (counted in left out too)"),
    ("data/label_counts", "label counts", "rows per label, by class id (training and validation)"),
    ("data/unigram_bpb", "  unigram entropy [bits/byte]", "the data's byte entropy: what a model that learned only "
     "byte frequencies scores"),
    ("data/changed", "changed since the checkpoint", "what changed in the data since the checkpoint this run resumed "
     "from (a resume refuses it unless after.allow_changed_data=true, or --allow-changed-data)"),
    ("data/format", "format", "instruction or preference data: its shape (prompt/response, Alpaca, chat; preference "
     "pairs or conversations) and columns"),
    ("data/examples", "examples", "instruction examples used, training and validation (after those left out)"),
    ("data/prompt_tokens", "  prompt tokens", "tokens of those examples outside the answers: prompts, templates, a "
     "chat's other turns (preference pairs: each pair's prompt once)"),
    ("data/answer_tokens", "  answer tokens", "tokens of the answers, the EOS after each included"),
    ("data/loss_tokens", "  tokens in the loss", "targets in the loss per epoch: the answers' (data.train_on=answer) "
     "or every position (all)"),
    ("data/cut_part", "  part cut", "what cutting an example at data.seq_len lost"),
    ("data/roles", "turns by role", "chat: the turns of each role as written, and the role data.roles or ShareGPT's "
     "names made of it (human -> user)"),
    ("data/turns_trained", "  assistant turns trained on", "chat: assistant turns with ids in the loss (one "
     "data.seq_len cuts counts while any of it is left)"),
    ("data/turns_cut", "  assistant turns cut off", "chat: assistant turns not trained on: data.seq_len cut them off "
     "whole, or left their row out"),
    ("data/turns_prompt", "  other turns (prompt)", "chat: turns of the other roles (system, user, a role data.roles "
     "keeps as it is): prompt, out of the loss unless data.train_on=all"),
    ("data/packs", "packed rows", "data.packing: training rows of exactly data.seq_len tokens (preference pairs: 2 x "
     "data.seq_len) the examples were packed into (best fit)"),
    ("data/examples_per_pack", "  examples per row", "examples (preference: pairs) per packed row, on average"),
    ("data/packing_padding_pct", "  padding [%]", "the share of the packed rows' positions that is padding"),
    ("data/batch_shape", "batch shape", "data.packing: the one shape of every batch, [data.batch_size, data.seq_len] "
     "(preference pairs: 2 x data.seq_len): the step compiles once, whatever the shape policy"),
    ("data/pairs", "pairs", "preference pairs used, training and validation (after those left out)"),
    ("data/completion_tokens", "  completion tokens", "tokens of the chosen and rejected completions in the loss, "
     "the EOS after each included"),

    # What compiling bought, step by step
    ("perf/eager_step_ms", "eager step [ms]", "median of the eager steps of the interleaved pairs"),
    ("perf/compiled_step_ms", "compiled step [ms]", "median of the compiled steps of the same pairs"),
    ("perf/speedup_x", "speedup [x]", "median over the pairs of eager/compiled time per token (25th to 75th "
     "percentile); compiling beside the run, pairs after its switch"),
    ("perf/speedup_p25_x", "", "the 25th percentile of the pairs' eager/compiled ratios"),
    ("perf/speedup_p75_x", "", "the 75th percentile of the pairs' eager/compiled ratios"),
    ("perf/speedup_pairs", "", "eager/compiled pairs the speedup is the median of"),
    ("perf/speedup_steps", "  pairs at steps", "the steps of the interleaved pairs (E C C E ...), after the warm-up "
     "and one FLOP-counting step"),
    ("perf/speedup_status", "", "how far the speedup measurement got: measured, nothing compiled, disabled, N of M "
     "pairs measured, or measured before the resume"),
    ("perf/break_even_step", "break-even step", "compile time (+ cost to the eager steps beside a compile process) / "
     "time saved per step, compiled step x (speedup - 1); never if speedup <= 1"),
    ("perf/beside_cost_s", "  cost to the eager steps [s]", "their time beyond the pairs' eager step; added to the "
     "compile time in the break-even step"),
    ("perf/step_ms", "step, last 50 [ms]", "median of the run's last 50 timed steps that compiled nothing (compiled, "
     "eager again after going back to eager, or eager if nothing compiled)"),
    ("perf/left_out_steps", "  steps left out", "steps no step time uses: they compiled, or recorded CUDA graphs "
     "(host time)"),
    ("perf/left_out_step_ms", "    their median [ms]", "median host time of the steps left out (compiling, or "
     "recording CUDA graphs)"),
    ("perf/recording_steps", "    of which recording CUDA graphs", "of the steps left out, those that only recorded "
     "CUDA graphs; absent when none did (the others compiled)"),
    ("perf/step_series", "", "every step: [{\"step\", \"ms\", \"mode\", \"timed\"}], mode compiled, eager, warmup, "
     "flops, compile, background or reverted (eager again after the switch); timed false: host time of a step not "
     "waited for (GPU), not plotted"),
    ("perf/step_series_stride", "", "1, or in a long run the stride of the compiled steps kept in perf/step_series "
     "(past 4096 of them, those at its multiples)"),
    ("perf/samples_per_s", "rows/s", "batch rows a second: rows per step (mean) over perf/step_ms, the same last 50 "
     "steps, all ranks; a packed row holds several examples (perf/examples_per_s counts them)"),
    ("perf/tokens_per_s", "positions/s (padding incl.)", "positions of a [batch, seq] batch a second, padding "
     "included: per step (mean) over perf/step_ms, all ranks (perf/loss_tokens_per_s counts the trained ones)"),
    ("perf/examples_per_s", "examples/s", "examples a second, all ranks: a padded row with a target in the loss, or "
     "each example of a packed row (preference data: pairs; any other batch: its rows); per step (mean) over "
     "perf/step_ms. Compares packed with padded runs"),
    ("perf/loss_tokens_per_s", "tokens in the loss/s", "targets in the loss a second, all ranks (an (inputs, "
     "targets) batch of token ids, -100 outside the loss): no padding, no prompt; per step (mean) over perf/step_ms"),
    ("perf/tflop_per_step", "TFLOP per step", "FLOPs of one step: counted on one eager step, or 6 x params x tokens"),
    ("perf/flops_source", "", "where perf/tflop_per_step comes from: flop_counter (one counted eager step), "
     "6*params*tokens, or none"),
    ("perf/mfu", "MFU", "FLOP/s achieved over the last 50 steps / the device's peak"),
    ("perf/peak_tflops", "  device peak [TFLOP/s]", "the peak MFU is against"),
    ("perf/peak_source", "  peak source", "measured by a matmul probe, cached, given, or achieved by this run (above "
     "the probe's: no MFU then)"),
    ("perf/host_ms_per_step", "host per step [ms]", "CUDA only: median host time of the compiled steps not waited "
     "for (launching the step's work; a replayed CUDA graph makes it small), over the last 1000"),
    ("perf/device_busy", "device busy", "CUDA only: share of one sampled window of compiled steps the device spent "
     "running kernels (the union of the profiler's kernel times over the window's wall time)"),
    ("perf/device_busy_steps", "", "the steps of the window perf/device_busy was sampled in"),

    # Memory
    ("memory/peak_gib", "peak memory [GiB]", "the most the fit's steps held, from the fit's start (the model's build "
     "and setup's measurements left out): CUDA: peak allocated by tensors; CPU: the process's peak resident set (on "
     "Linux; elsewhere from the process's start)"),

    # What runner compiles and how
    ("compile/scope", "compile scope", "what torch.compile wraps: step, blocks, model (none: eager)"),
    ("compile/target", "", "what the compiled callable is: nothing, submodules, blocks, step or step_and_backward"),
    ("compile/backend", "", "torch.compile's backend (compile.backend)"),
    ("compile/mode", "", "torch.compile's mode (null: its default)"),
    ("compile/options", "  Inductor options", "options passed to torch.compile, runner's defaults included"),
    ("compile/compiled_autograd", "", "whether compiled autograd captures the whole backward "
     "(compile.compiled_autograd)"),
    ("compile/modules_compiled", "", "modules compiled in place over the fit"),
    ("compile/dynamic_state_sources", "", "Lightning's step-time Python state (fit-loop counters, batch_idx) passed "
     "to the graph as dynamic inputs: Dynamo's source patterns"),
    ("compile/optimizer", "optimizer step", "how the optimizer step runs (fused kernel, compiled, as given)"),
    ("compile/optimizer_reason", "", "why the optimizer step runs as it does: how many of its steps ran eagerly, or "
     "when it was demoted"),
    ("compile/optimizer_eager", "", "optimizers kept eager under compile.optimizer=compiled, each with why (its step "
     "needs its closure, or is the user's own)"),
    ("compile/optimizer_compiled_steps", "optimizer steps compiled", "optimizer steps that ran the compiled step"),
    ("compile/optimizer_eager_steps", "optimizer steps eager", "optimizer steps that ran eagerly (forced-eager "
     "steps: warm-up, the speedup pairs' eager side)"),

    # What compiling did
    ("compile/frames", "frames compiled", "Python functions Dynamo compiled"),
    ("compile/frame_compiles", "", "every forward compile: first compiles and recompiles of every frame"),
    ("compile/graphs", "graphs", "FX graphs produced (a graph break splits a function into several)"),
    ("compile/recompiles", "recompiles", "compiles of an already compiled function after a guard failed"),
    ("compile/frame_recompiles", "", "recompiles of every frame, the continuations after a graph break included "
     "(compile/recompiles folds those into their parent's)"),
    ("compile/graph_breaks", "graph breaks", "distinct places where Dynamo split the graph"),
    ("compile/graph_break_hits", "", "how often the graph-break sites were hit while tracing, all sites together"),
    ("compile/guards_total", "guards (total)", "guards checked before compiled code runs, all cache entries"),
    ("compile/guards_max", "guards (max per entry)", "guards of the largest cache entry"),
    ("compile/live_guards_total", "", "leaf guards checked at run time (after guard_filter_fn), all live cache "
     "entries"),
    ("compile/live_guards_max", "", "leaf guards of the largest live cache entry, as checked at run time"),
    ("compile/time_s", "compile time [s]", "seconds compiling in the run: forward, backward, recompiles; a resumed "
     "run adds the parts before its resume (compile/time_before_resume_s)"),
    ("compile/time_before_resume_s", "  before the resume [s]", "of which before the resume, in the processes the "
     "run resumed from (the rows below it are this process's)"),
    ("compile/dynamo_s", "  Dynamo [s]", "of which tracing Python into graphs"),
    ("compile/aot_autograd_s", "  AOTAutograd [s]", "of which building the backward graphs"),
    ("compile/inductor_s", "  Inductor [s]", "of which generating and compiling kernels"),
    ("compile/backward_s", "", "of compile/time_s, the seconds compiling backward graphs"),
    ("compile/wall_s", "", "wall-clock seconds between torch's compile start and end callbacks, CUDA-graph "
     "recordings left out"),
    ("compile/cudagraph_recording_s", "", "wall-clock seconds recording CUDA graphs (a recording runs the graph, it "
     "does not compile it)"),
    ("compile/cudagraph_recordings", "", "CUDA-graph recordings seen by torch's compile callbacks"),
    ("compile/cudagraph_skips", "CUDA-graph skips", "graphs Inductor did not run as CUDA graphs"),
    ("compile/fallbacks", "eager fallbacks", "functions that failed to compile and ran eagerly"),
    ("compile/demotions", "demoted frames", "frames that recompiled twice on one guard and were demoted "
     "(compile/demoted: which, to what)"),
    ("compile/demoted", "", "the frames demoted after a recompile storm: [{\"frame\", \"guard\", \"step\", \"to\"}], "
     "to compiled submodules or eager"),
    ("compile/recompile_limit_hits", "", "recompile limits hit: [{\"limit\", \"function\", \"guard\"}] (the frame "
     "then runs eagerly, or the run stops under compile.on_error=raise)"),
    ("compile/recompile_reasons", "", "every recompile: [{\"name\", \"location\", \"compile_id\", \"reason\", "
     "\"step\", \"fix\"}], the guard that failed and the change that avoids it"),
    ("compile/graph_break_reasons", "", "every graph-break site: [{\"reason\", \"user_frame\", \"count\", \"fix\"}], "
     "how often it was hit and the change that removes it"),
    ("compile/fallback_reasons", "", "every function that failed to compile and ran eagerly: [{\"name\", "
     "\"compile_id\", \"reason\"}]"),
    ("compile/events", "", "every compile: [{\"kind\", \"name\", \"compile_id\", \"step\", \"duration_s\"}], kind "
     "from torch's trigger: compile, recompile, backward, cudagraph_recording"),
    ("compile/reasons", "", "wandb only: one table (kind, name, location, step, count, reason) of every recompile, "
     "graph-break site and eager fallback"),

    # The compile caches
    ("compile/cache_hits", "compile-cache hits", "graphs loaded from Inductor's or AOTAutograd's disk cache"),
    ("compile/cache_misses", "compile-cache misses", "graphs looked up in those caches and compiled anew"),
    ("compile/cache_artifacts_loaded", "", "torch's portable cache artifacts loaded from "
     "reliability.load_cache_artifacts: entries per artifact kind (null: none loaded)"),
    ("compile/cache_artifacts_saved", "", "where the run saved torch's portable cache artifacts "
     "(reliability.save_cache_artifacts; null: not saved)"),
    ("compile/remote_cache", "", "the shared cache's address (compile.cache), without its password"),
    ("compile/remote_cache_status", "shared cache (compile.cache)", "in use (every entry signed); in use, unsigned "
     "(compile.cache_trust=unsigned); unreachable; or off after a failure, and why"),
    ("compile/remote_cache_hits", "shared-cache hits", "graphs found in the shared compile cache (compile.cache), "
     "FX-graph and AOTAutograd"),
    ("compile/remote_cache_misses", "shared-cache misses", "graphs looked up there and compiled anew"),
    ("compile/remote_entries_rejected", "  entries rejected", "torch's entries read from the shared cache and "
     "refused before torch saw them: unsigned, signed under another secret, changed, truncated or moved from another "
     "key (counted as misses, compiled here and stored again)"),
    ("compile/remote_kernels_fetched", "  kernels fetched", "CPU: built kernels taken from the shared cache"),
    ("compile/remote_kernels_uploaded", "", "CPU: built kernels this process added to the shared cache"),
    ("compile/remote_kernels_rejected", "  kernels rejected", "CPU: shared entries not written: a bad name, "
     "signature or content (compiled here instead)"),

    # Compile beside the run (``compile.background``)
    ("compile/background", "compile.background", "compile.background: auto, shared, pinned, or disabled (compiled "
     "inside the first step)"),
    ("compile/background_outcome", "  outcome", "switched at which step, stayed eager (and why), not ready when "
     "training ended, or failed"),
    ("compile/background_placement", "", "where the compile process ran: on every core (shared), pinned to one core, "
     "or on every core but the run's (auto on a GPU)"),
    ("compile/background_room", "  device memory", "auto on a GPU: the device memory free after the first step "
     "against what a compile process needs, on which it started one or compiled in the run"),
    ("compile/background_s", "  compile process [s]", "seconds from starting the compile process to its end"),
    ("compile/eager_steps_beside", "  eager steps meanwhile", "steps trained eagerly while it ran"),
    ("compile/eager_step_beside_ms", "  eager step meanwhile [ms]", "median wall time of those steps (they share the "
     "cores with the compile process)"),
    ("compile/background_speedup_x", "  speedup the process measured [x]", "before the switch: eager/compiled CPU "
     "time of the compile process's own step pairs (one batch, in that process), on which auto decides whether to "
     "switch"),
    ("compile/after_switch_speedup_x", "  speedup after the switch [x]", "after the switch, in the run: eager over "
     "compiled median wall time of its first compiled steps against the eager steps interleaved with them (the speedup "
     "pairs'), else those before the switch; clearly below 1 (at most 0.8) it goes back to eager"),
    ("compile/background_reverted", "  back to eager", "the step from which the run went back to eager because its "
     "compiled steps ran clearly slower than the eager ones, with both medians; absent when it did not"),
    ("compile/background_switch_s", "", "under auto, the compile process's estimate of the switch: the same compile "
     "from the warm cache, CPU seconds"),
    ("compile/switch_step", "", "the step at which the run switched to the compiled step (counted from 0, as "
     "perf/step_series counts)"),

    # CUDA graphs
    ("cudagraphs/requested", "", "whether CUDA graphs were asked for (cudagraphs.mode)"),
    ("cudagraphs/mode", "", "cudagraphs.mode: auto (the default), reduce_overhead (Inductor's CUDA-graph trees) or "
     "disabled"),
    ("cudagraphs/active", "CUDA graphs active", "whether CUDA graphs were recorded and replayed"),
    ("cudagraphs/recordings", "  graphs recorded", "CUDA graphs recorded (graph partitions), all steps"),
    ("cudagraphs/rerecordings", "  recorded again", "recordings of a graph already recorded in an earlier step (0 "
     "when replays hold)"),
    ("cudagraphs/recording_steps", "", "steps that recorded anything"),
    ("cudagraphs/replay_steps", "  steps replayed", "steps whose own forward and backward replayed their graphs, "
     "recording nothing"),
    ("cudagraphs/static_state_tensors", "", "optimizer-state tensors marked static, so a graph reads them in place"),
    ("cudagraphs/static_batch_copies", "", "batch tensors copied into their static buffers"),
    ("cudagraphs/static_batch_passed_through", "", "batches passed on as they were: a new signature after the static "
     "buffers' max_signatures"),
    ("cudagraphs/partitions_graphed", "  partitions in CUDA graphs", "graph partitions Inductor made CUDA graphs of, "
     "of all it made (each compiled graph is split where a node cannot be recorded; the rest run eagerly, each reason "
     "listed under the table with its fix)"),
    ("cudagraphs/partitions", "", "graph partitions Inductor made of the graphs it compiled (M of partitions in CUDA "
     "graphs)"),
    ("cudagraphs/graphs_partitioned", "", "compiled graphs whose partitions are counted (a graph loaded from the "
     "compile cache is not)"),
    ("cudagraphs/eager_reasons", "", "nodes left out of CUDA graphs: [{\"reason\", \"nodes\", \"graphs\", "
     "\"example\", \"fix\"}], torch's reason, how many, in which graphs, one operator and the change that brings them "
     "in"),
    ("cudagraphs/decision", "CUDA graphs", "whether CUDA graphs are on and why: cudagraphs=auto's decision (on where "
     "the step is eligible, off with the reason otherwise), or what was asked for"),
    ("cudagraphs/optimizer_recordings", "  optimizer step recorded", "captures of the graph-safe optimizer step "
     "(clipping, the update, zeroing) into its CUDA graph: 1 when its replays hold"),
    ("cudagraphs/optimizer_replays", "  optimizer steps replayed", "optimizer steps that replayed the graph-safe "
     "step's CUDA graph"),
    ("cudagraphs/optimizer_uncaptured", "", "optimizer steps the graph-safe step ran as it is: its warm-up, "
     "everywhere without CUDA graphs, or after it stopped capturing (why: compile/optimizer_reason)"),

    # Shapes
    ("dynamic/policy", "shape policy", "how changing batch shapes are compiled"),
    ("dynamic/after_warmup", "", "dynamic.after_warmup: what a new shape after warm-up does"),
    ("dynamic/agreement", "", "how ranks agree on which dims are dynamic: local (one process, or nothing to agree "
     "on) or runner"),
    ("dynamic/graphs", "", "graphs compiled by the training step"),
    ("dynamic/frame_compiles", "", "forward compiles of the training step, first compiles and recompiles"),
    ("dynamic/recompiles", "", "recompiles of the training step"),
    ("dynamic/recompile_reasons", "", "the guard that failed for each recompile of the training step (the first 20)"),
    ("dynamic/compile_s", "", "seconds compiling the training step (its compiles only)"),
    ("dynamic/padding_waste_pct", "  padding [% of tokens]", "tokens added by padding to a bucket"),
    ("dynamic/agreed_dynamic_dims", "", "the (tensor index, dim) pairs of the batch the ranks agreed are dynamic"),
    ("dynamic/agreement_exchanges", "", "steps whose shapes were exchanged (the first step, and one per flagged "
     "change)"),
    ("dynamic/agreement_checks", "", "steps whose one-integer flag was all-reduced"),
    ("dynamic/agreement_held_steps", "", "steps this rank ran eagerly because it saw a size not yet agreed on"),

    # Saved activations
    ("offload/strategy", "saved activations", "how activations saved for backward are kept"),
    ("offload/active", "", "whether the strategy changed what was saved (false under none, or on the path none)"),
    ("offload/path", "", "the path the strategy took: traced, eager_hooks, mixed, checkpoint_per_block, "
     "partitioner_budget, cached, pending or none (the measured path when it was measured)"),
    ("offload/excluded_modules", "", "modules whose saved tensors offload.exclude keeps as they are"),
    ("offload/eager_packed", "", "saved tensors the hooks packed eagerly"),
    ("offload/eager_skipped", "", "saved tensors the hooks kept as they were eagerly (not worth packing, excluded, a "
     "parameter or the batch)"),
    ("offload/traced_packed", "", "saved values packed while AOTAutograd traced (per trace, not per step)"),
    ("offload/traced_skipped", "", "saved values kept as they were while AOTAutograd traced (not worth packing, or "
     "excluded)"),
    ("offload/checkpoint_mode", "", "how checkpoint recomputes: per_block, or memory_budget (the partitioner's)"),
    ("offload/checkpointed_blocks", "", "blocks wrapped in activation checkpoints"),
    ("offload/memory_budget", "", "the partitioner's activation memory budget as torch holds it while the run "
     "compiles"),
    ("offload/offloaded_bytes_total", "", "bytes of saved activations copied to pinned host memory (CUDA offload)"),
    ("offload/reduction_x", "  saved bytes reduction [x]", "saved-activation bytes of `none` / of this strategy, on "
     "one validation batch"),
    ("offload/grad_rel_error", "  grad rel. error vs none", "relative gradient error against `none`, same batch"),
    ("offload/saved_bytes_none", "", "the measurement's saved-activation bytes under none"),
    ("offload/saved_bytes", "", "the measurement's saved-activation bytes under this strategy"),
    ("offload/loss_abs_diff", "", "the measurement's absolute loss difference against none, same batch"),
    ("offload/measure_path", "", "the path the strategy took in the measurement"),
    ("offload/measure_compiled", "", "whether the measurement compiled its step"),
    ("offload/measure_device", "", "the device the measurement ran on"),
    ("offload/measure_skipped", "", "why the measurement could not run here (manual optimization, a sharded "
     "strategy, no validation batch)"),

    # The reliability callbacks' figures
    ("reliability/skipped_steps", "", "steps skipped for a non-finite loss (reliability=skip_nonfinite): their "
     "numbers in the report, how many so far in the logged metric"),

    # The compile trace (``telemetry.trace``)
    ("trace/html", "compile report (tlparse)", "tlparse's report of every compile"),
    ("trace/file", "", "torch's structured trace, relative to the run directory"),
    ("trace/status", "", "what became of the trace: rendered, nothing was compiled, or why tlparse did not render it"),

    # Figures across the ranks of a multi-process fit
    ("ranks/compiles_agree", "", "whether every rank compiled the same graphs, recompiles and graph breaks"),
    ("ranks/perf/step_ms", "", "each rank's perf/step_ms, one entry per rank"),
    ("ranks/perf/samples_per_s", "", "each rank's perf/samples_per_s, one entry per rank"),
    ("ranks/perf/tokens_per_s", "", "each rank's perf/tokens_per_s, one entry per rank"),
    ("ranks/memory/peak_gib", "", "each rank's memory/peak_gib, one entry per rank"),
    ("ranks/compile/time_s", "", "each rank's compile/time_s, one entry per rank"),
    ("ranks/compile/graphs", "", "each rank's compile/graphs, one entry per rank"),
    ("ranks/compile/recompiles", "", "each rank's compile/recompiles, one entry per rank"),
    ("ranks/compile/graph_breaks", "", "each rank's compile/graph_breaks, one entry per rank"),

    # ``runner tune``
    ("tune/trial", "", "the trial's number in the study (-1: the eager baseline)"),
    ("tune/state", "", "how the trial ended: baseline (the eager run), complete, rejected, pruned, invalid or failed"),
    ("tune/reason", "", "why the trial ended as it did (empty when complete)"),
    ("tune/us_per_token", "time/token [us]", "microseconds per token over the trial's last 50 steps"),
    ("tune/speedup_vs_eager_x", "vs eager [x]", "the eager baseline's time per token / this trial's"),

    # What ``runner eval`` measured
    ("eval/checkpoint", "checkpoint", "the checkpoint evaluated"),
    ("eval/step", "step", "the training step it was saved at"),
    ("eval/data", "data", "the data evaluated: the run's validation split, or the overrides given"),
    ("eval/mode", "mode", "eager or compiled, and why"),
    ("eval/examples", "examples", "sequences or examples evaluated"),
    ("eval/tokens", "tokens", "target positions scored (language models)"),
    ("eval/loss", "loss", "mean cross-entropy over every target, in nats"),
    ("eval/perplexity", "perplexity", "exp(loss): the perplexity per token (language models)"),
    ("eval/bpb", "bits per byte", "the loss in bits per byte (byte-level text only)"),
    ("eval/accuracy", "accuracy", "share of the examples classified right"),
    ("eval/macro_f1", "macro-F1", "F1 per class, averaged over the classes"),
    ("eval/labels", "", "the class names, by class id (labels.json, else the ids)"),
    ("eval/precision", "", "precision per class, by class id"),
    ("eval/recall", "", "recall per class, by class id"),
    ("eval/support", "", "examples per class, by class id"),
    ("eval/confusion", "", "confusion matrix: rows the true class, columns the predicted one"),
    ("eval/pairs", "pairs", "preference pairs evaluated"),
    ("eval/rewards/accuracies", "rewards/accuracies", "share of the pairs whose chosen reward is above the rejected "
     "one's: the preference accuracy (a tie counts as wrong, as in TRL)"),
    ("eval/rewards/margins", "rewards/margins", "mean of chosen minus rejected reward over the pairs"),
    ("eval/rewards/chosen", "rewards/chosen", "mean reward of the chosen completions (val/rewards/chosen's meaning)"),
    ("eval/rewards/rejected", "rewards/rejected", "mean reward of the rejected completions"),
    ("eval/logps/chosen", "logps/chosen", "mean log-probability of the chosen completions (summed over their tokens; "
     "SimPO, ORPO: per token)"),
    ("eval/logps/rejected", "logps/rejected", "the same for the rejected completions"),
    ("eval/answers/template", "answers: prompt format", "the prompt format the held-out prompts were written in"),
    ("eval/answers/no_answer", "answers: no answer to score", "held-out examples whose prompt fills data.seq_len"),
    ("eval/answers/examples", "answers: examples", "held-out prompts answered (runner eval --generate)"),
    ("eval/answers/exact", "answers: exact match", "share of answers equal to the reference, both normalised"),
    ("eval/answers/exact_count", "answers: exact matches", "answers equal to the reference, both normalised"),
    ("eval/answers/contains", "answers: contains", "share of answers holding the normalised reference"),
    ("eval/answers/contains_count", "answers: containing", "answers holding the normalised reference"),
    ("eval/answers/regex", "answers: regex match", "share of answers whose regex match equals the reference"),
    ("eval/answers/regex_count", "answers: regex matches", "answers whose regex match equals the reference"),
    ("eval/answers/regex_pattern", "answers: regex", "the --regex pattern scored (None: none given)"),
    ("eval/answers/cut", "answers: references cut", "references cut at data.seq_len (scored as cut)"),
    ("eval/answers/max_new_tokens", "answers: max new tokens", "the longest answer written, in tokens"),
    ("eval/answers/normalisation", "answers: normalisation", "what exact and contains compare"),
    ("eval/answers/decode", "answers: decode", "eager, or compiled and the graphs it compiled"),
    ("eval/answers/tokens_per_s", "answers: tokens/s", "new tokens written per second, over every batch"),

    # Fine-tuning through an adapter
    ("peft/method", "method", "how the model was fine-tuned: lora or qlora (peft.method)"),
    ("peft/targets", "adapted linears", "linear layers the adapter adapts (peft.target_modules)"),
    ("peft/trainable_params", "trainable parameters", "parameters the optimizer updates: the adapter and the modules "
     "trained in full"),
    ("peft/total_params", "total parameters", "parameters of the model, each NF4 base weight counted by the values "
     "it holds"),
    ("peft/trainable_pct", "trainable [%]", "trainable parameters as a share of the total, in percent"),
    ("peft/optimizer_state_bytes", "optimizer state [bytes]", "bytes of the optimizer's state at the end of the fit "
     "(AdamW: two moments per trainable parameter)"),
    ("peft/base_weight_bytes", "frozen weights [bytes]", "bytes of the frozen weights (NF4 codes and scales under "
     "qlora)"),

    # The loss
    ("loss/chunked", "chunked loss", "whether the loss was computed a chunk of positions at a time from the last "
     "hidden states and the output layer's weight (true) or from the whole logits (false)"),
    ("loss/chunks", "loss chunks", "chunks a full step's positions were cut into (a chunked loss only)"),
    ("loss/chunk_rows", "positions per chunk", "positions per chunk of the chunked loss"),
    ("loss/reason", "loss computed", "why the loss was chunked or not: loss.chunked and what the run found"),
    ("loss/logits_gib", "a step's logits [GiB]", "one float32 copy of a full step's logits [positions x vocabulary] "
     "in GiB: what an unchunked loss holds, twice with its gradient"),

    # Preference tuning (``objective=dpo|simpo|orpo``, docs/preference.md)
    ("objective/loss", "objective", "what the training step minimised (objective.loss): dpo, simpo or orpo; absent "
     "for sft"),
    ("objective/beta", "  beta", "objective.beta: DPO's pull towards the reference, SimPO's reward scale, ORPO's "
     "weight of the odds-ratio term"),
    ("objective/gamma", "  gamma", "objective.gamma: SimPO's target reward margin (TRL's simpo_gamma); absent for "
     "the objectives that have none"),
    ("objective/label_smoothing", "  label smoothing", "objective.label_smoothing: DPO's and SimPO's share of pairs "
     "taken as mislabelled (0: the plain loss); absent for ORPO"),
    ("objective/reference", "  reference", "where DPO's reference log-probabilities came from: the adapter's frozen "
     "base in the same compiled step, a frozen copy, or a precomputed cache"),
    ("objective/reference_bytes", "  reference copy [bytes]", "bytes of the frozen copy of the model that is the "
     "reference (objective.reference=copy), on top of the model trained"),
    ("objective/reference_cache", "  reference cache", "objective.reference=precompute: the cache of reference "
     "log-probabilities, and whether this run computed or read it"),

    # A preference objective's rewards under TRL's names (``rewards/*``), at the last logged training step
    ("rewards/chosen", "  train rewards/chosen", "mean reward of the chosen completions at the last logged training "
     "step: beta x (policy - reference log-probability) for DPO; beta x the policy's mean log-probability per token "
     "for SimPO and ORPO (TRL's)"),
    ("rewards/rejected", "  train rewards/rejected", "the same for the rejected completions"),
    ("rewards/accuracies", "  train rewards/accuracies", "share of the step's pairs whose chosen reward is above the "
     "rejected one's"),
    ("rewards/margins", "  train rewards/margins", "mean of chosen minus rejected reward over the step's pairs"),

    # A preference objective's log-probabilities under TRL's names (``logps/*``), at the last logged training step
    ("logps/chosen", "  train logps/chosen", "mean log-probability the policy gives the chosen completions, summed "
     "over their tokens (SimPO, ORPO: per token)"),
    ("logps/rejected", "  train logps/rejected", "the same for the rejected completions"),

    # TRL's preference figures over the validation pairs (``val/rewards/*``, ``val/logps/*``), at the last validation
    ("val/rewards/chosen", "  val rewards/chosen", "rewards/chosen over the validation pairs at the last validation"),
    ("val/rewards/rejected", "  val rewards/rejected", "rewards/rejected over the validation pairs"),
    ("val/rewards/accuracies", "  val rewards/accuracies", "share of the validation pairs whose chosen reward is "
     "above the rejected one's: the preference accuracy"),
    ("val/rewards/margins", "  val rewards/margins", "rewards/margins over the validation pairs"),
    ("val/logps/chosen", "  val logps/chosen", "logps/chosen over the validation pairs"),
    ("val/logps/rejected", "  val logps/rejected", "logps/rejected over the validation pairs"),
)

METRICS: dict[str, Metric] = {key: Metric(key, label, meaning) for key, label, meaning in _ROWS}
assert len(METRICS) == len(_ROWS), "a metric is defined twice"


def metric(key: str) -> Metric:
    """The definition of ``key``; KeyError when runner reports no such metric."""
    return METRICS[key]


def defined() -> tuple[Metric, ...]:
    return tuple(METRICS.values())


RANKS = "ranks/"
# The figures gathered from every rank at the end of a multi-process fit, each as ``ranks/<figure>``.
PER_RANK: dict[str, str] = {key: RANKS + key for key in (
    "perf/step_ms", "perf/samples_per_s", "perf/tokens_per_s", "memory/peak_gib", "compile/time_s", "compile/graphs",
    "compile/recompiles", "compile/graph_breaks")}
TRAIN_METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
                 "logps/rejected")
VAL_METRICS = tuple("val/" + key for key in TRAIN_METRICS)  # what a preference step logs, in TRL's order


@runtime_checkable
class ReportsFigures(Protocol):
    """Anything with ``figures()``: flat, namespaced metrics for loggers and the run report."""

    def figures(self) -> dict[str, Any]: ...


def collect_figures(sources: Iterable[object]) -> dict[str, Any]:
    """Merge the metrics of every source that reports any, in order (later keys win)."""
    out: dict[str, Any] = {}
    for source in sources:
        if isinstance(source, ReportsFigures):
            out.update(source.figures())
    return out


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and its noun, singular for one (``1 chunk``, ``8 chunks``)."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"
