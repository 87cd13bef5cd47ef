"""Every version-specific torch internal runner touches, one function each: the bottom layer.

Much of what runner needs from torch.compile is private: counter names, the compilation-metrics
deque, the compile callback registry, cache entries, the graph-break artifact logger, the stance
object, Dynamo/Inductor/functorch config keys, the saved-tensor-hook inlining check, dynamic-shape
marks, the messages of compile errors. Each is reached through exactly one function here, and
``tests/test_torch_internals.py`` pins every one against the installed torch, so a torch upgrade
breaks one named test instead of the product. No other runner module names ``torch._dynamo``,
``torch._inductor``, ``torch._functorch`` or ``torch._logging``.

Process-wide settings go through :class:`TorchSettings`, which records what it found and puts it
back on ``restore()``: Hydra multirun jobs and a user's own code share the process.

A package of nine modules by concept (``observation``, ``events``, ``settings``, ``errors``, ``runtime``,
``trace``, ``partitions``, ``caches``, and torchao's ``nf4``); this module re-exports every name, so callers write
``ti.<name>`` and never import a submodule.

Pinned against torch 2.11 through 2.15 (``tests/test_torch_internals.py`` runs on each in CI)."""

from __future__ import annotations

from runner.torch_internals.caches import (  # noqa: F401
    REDIS_URL_ENV,
    EntryCodec,
    cpu_kernel_files,
    cpu_kernels_in_use,
    inductor_cache_dir,
    kernel_key,
    read_kernel_locked,
    remote_cache_stats,
    stop_remote_compile_cache,
    use_remote_compile_cache,
    wrap_remote_cache_backend,
)
from runner.torch_internals.errors import (  # noqa: F401
    CONVERT_FRAME_LOGGER,
    FAIL_ON_RECOMPILE_PREFIX,
    backend_name,
    compile_error_kind,
    fallback_from_record,
    frame_of,
    graph_break_type,
    inner_exception,
    is_fail_on_recompile,
    limit_hit_from_record,
)
from runner.torch_internals.events import (  # noqa: F401
    COMPILE_EVENT_SOURCE,
    CUDAGRAPH_RECORDING_TRIGGER,
    CompileCallback,
    CompileEvents,
    compiling_target,
)
from runner.torch_internals.nf4 import nf4_module, nf4_problem, torchao_import_quiet  # noqa: F401
from runner.torch_internals.observation import (  # noqa: F401
    COUNTERS,
    GRAPH_BREAK_GROUP,
    RESUME_PREFIX,
    CompileRecord,
    compilation_metrics,
    compilation_metrics_limit,
    counter,
    counter_now,
    counters_snapshot,
    cuda_kernel_profiler,
    cudagraph_tree_state,
    graph_break_counts,
    graph_break_logger,
    graphs_compiled,
    keep_compilation_metrics,
    kernel_intervals,
    live_guard_counts,
    resume_parent,
    set_compilation_metrics_limit,
    to_record,
)
from runner.torch_internals.partitions import (  # noqa: F401
    DYNAMIC_SHAPE_REASON,
    MIN_SIZE_REASON,
    GraphPartitions,
    graph_level_symbols,
    observe_graph_partitions,
    partition_check_counts_loop_indices,
    partition_on_graph_symbols_only,
    partition_summary,
)
from runner.torch_internals.runtime import (  # noqa: F401
    SHAPE_MARKS,
    CodeSnapshot,
    clear_inductor_memory_caches,
    code_snapshot,
    codes_compiled_since,
    compiled_autograd,
    copy_shape_marks,
    current_stance,
    find_code,
    forget_codes,
    fused_kernel_devices,
    hooks_are_inlineable,
    load_inductor,
    mark_dynamic,
    mark_static_address,
    mark_unbacked,
    mark_wrapped,
    maybe_mark_dynamic,
    memory_budget,
    reset_compiler,
    restore_stance,
    run_code_eagerly,
    set_stance,
    skip_update_on,
    stance_now,
    traced_saved_node,
    tree_leaves,
    tree_map,
    unbacked_bounds_unsupported,
    zero_in_place,
)
from runner.torch_internals.settings import (  # noqa: F401
    AUTO_CHUNKER,
    MANAGED,
    TorchSettings,
    add_dynamic_sources,
    auto_chunker_options,
    cpu_capability,
    lift_python_scalars,
    local_source_pattern,
    machine_cache_dir,
    managed_settings,
)
from runner.torch_internals.trace import start_structured_trace  # noqa: F401
