"""Pins every torch internal in runner.torch_internals against the installed torch.

A torch upgrade that renames a counter, a metrics field or a private hook fails here, by name.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import time
from pathlib import Path

import pytest
import torch

from runner.torch_internals import caches, errors, observation, partitions, runtime
from runner.torch_internals import nf4 as torch_nf4
from runner.torch_internals import settings as torch_settings


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _break_fn(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos() + 1


@pytest.mark.parametrize("key", sorted(observation.COUNTERS))
def test_counter_names_are_incremented_by_torch(key: str) -> None:
    group, name, module = observation.COUNTERS[key]
    source = inspect.getsource(importlib.import_module(module))
    assert f'counters["{group}"]["{name}"]' in source


def test_graph_break_counter_group() -> None:
    from torch._dynamo import symbolic_convert

    assert f'add_to_stats("{observation.GRAPH_BREAK_GROUP}")' in inspect.getsource(symbolic_convert)


def test_metrics_fields_used_by_to_record_exist() -> None:
    from torch._dynamo.utils import CompilationMetrics

    fields = {f.name for f in dataclasses.fields(CompilationMetrics)}
    used = {
        "compile_id", "is_forward", "co_name", "co_filename", "co_firstlineno", "guard_count",
        "dynamo_cumulative_compile_time_us", "aot_autograd_cumulative_compile_time_us",
        "backward_cumulative_compile_time_us", "inductor_cumulative_compile_time_us", "recompile_reason",
        "restart_reasons", "fail_type", "fail_reason", "cudagraph_skip_reason", "start_time_us",
    }
    assert used <= fields, used - fields


def test_metrics_limit_roundtrip() -> None:
    before = observation.compilation_metrics_limit()
    observation.set_compilation_metrics_limit(1234)
    try:
        assert observation.compilation_metrics_limit() == 1234
    finally:
        observation.set_compilation_metrics_limit(before or 64)


def test_real_compile_records_callbacks_guards_and_resume_names() -> None:
    calls: list[tuple[str, str, object]] = []
    remove = observation.COMPILE_EVENT_SOURCE.subscribe(
        lambda trig, cid: calls.append(("start", trig, observation.compiling_target())),
        lambda trig, cid: calls.append(("end", trig, None)),
    )
    # By start time, not by index: torch keeps the last 64 records, so a full deque would slice empty.
    start_us = time.time_ns() // 1000
    try:
        torch.compile(_break_fn, backend="eager", dynamic=False)(torch.randn(3))
    finally:
        remove()
    records = [r for r in map(observation.to_record, observation.compilation_metrics())
               if (r.start_us or 0) >= start_us]
    assert [r.co_name for r in records][0] == "_break_fn"
    assert observation.resume_parent(records[1].co_name) == "_break_fn"  # continuation naming
    assert records[0].guard_count and records[0].total_s > 0
    assert any("graph_break()" in reason for reason in records[0].restart_reasons)
    assert calls[0][:2] == ("start", "DYNAMO") and calls[0][2][0] == "_break_fn"  # type: ignore[index]
    assert sum(1 for c in calls if c[0] == "end") == 2
    live = observation.live_guard_counts()
    assert any(k.startswith("_break_fn") and v[0] > 0 for k, v in live.items())
    snap = observation.counters_snapshot()
    assert sum(observation.graph_break_counts(snap).values()) >= 1
    assert observation.counter(snap, "unique_graphs") >= 2
    assert observation.compiling_target() is None  # outside a compile


def test_compiling_target_names_the_wrapped_module() -> None:
    names: list[object] = []
    remove = observation.COMPILE_EVENT_SOURCE.subscribe(lambda t, c: names.append(observation.compiling_target()))
    try:
        torch.compile(torch.nn.Linear(2, 2), backend="eager")(torch.randn(1, 2))
    finally:
        remove()
    assert names[0][0] == "Linear.forward"  # type: ignore[index]


def test_graph_break_logger_is_the_artifact_logger() -> None:
    logger = observation.graph_break_logger()
    assert isinstance(logger, logging.Logger) and logger.name.endswith("__graph_breaks")


def test_stance_swap_and_restore() -> None:
    assert runtime.current_stance() == "default"
    found = runtime.stance_now()
    prior = runtime.set_stance("force_eager")
    try:
        assert runtime.current_stance() == "force_eager" and prior is found
        runtime.set_stance("fail_on_recompile")
        assert runtime.current_stance() == "fail_on_recompile"
    finally:
        runtime.restore_stance(prior)
    assert runtime.current_stance() == "default" and runtime.stance_now() is found


# -- dynamic shapes ------------------------------------------------------------------------------
def test_torch_internals_are_pinned() -> None:
    """The fail_on_recompile message, compile records and dynamic-shape marks the shape policies use."""
    torch._dynamo.reset()
    start = time.time_ns() // 1000
    f = torch.compile(lambda t: t.sin() + 1, backend="eager", dynamic=False)
    f(torch.randn(3))
    with pytest.raises(RuntimeError) as info, torch.compiler.set_stance("fail_on_recompile"):
        f(torch.randn(4))
    assert errors.is_fail_on_recompile(info.value)
    assert "size mismatch at index 0. expected 3, actual 4" in str(info.value)
    f(torch.randn(4))
    assert observation.graphs_compiled() == 2
    records = [r for r in map(observation.to_record, observation.compilation_metrics()) if (r.start_us or 0) >= start]
    assert len(records) == 2 and all(r.total_s > 0 for r in records)
    assert any("expected 3, actual 4" in (r.recompile_reason or "") for r in records)
    # Each mark records itself on the tensor, and a marked dim compiles one graph for every size.
    u, d, m = torch.randn(2, 5), torch.randn(2, 5), torch.randn(2, 5)
    if runtime.unbacked_bounds_unsupported() is None:
        runtime.mark_unbacked(u, 1, min=2, max=None, shape_id="dim1")
        assert u._dynamo_unbacked_bounds == {1: (2, None)}
    else:  # torch 2.11: marked without its bounds, and said so
        with pytest.warns(UserWarning, match="takes no min/max"):
            runtime.mark_unbacked(u, 1, min=2, max=None, shape_id="dim1")
    runtime.mark_dynamic(d, 1, min=2, max=None)
    runtime.maybe_mark_dynamic(m, 0)
    assert 1 in u._dynamo_unbacked_indices and 1 in d._dynamo_dynamic_indices and 0 in m._dynamo_weak_dynamic_indices
    torch._dynamo.reset()
    before = observation.graphs_compiled()
    g = torch.compile(lambda t: t * 2, backend="eager")
    for n in (5, 7, 9):
        x = torch.randn(2, n)
        runtime.mark_dynamic(x, 1, min=2, max=None)
        g(x)
    assert observation.graphs_compiled() - before == 1


def test_unbacked_bounds_per_torch_version(tmp_path: Path) -> None:
    """torch 2.11's mark_unbacked takes no bounds (2.13 and later do): there dynamic=unbacked, which needs a
    lower bound of 2 to keep causal attention in one graph, is refused up front with the fix."""
    from runner.config import ConfigError, compose, load

    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    why = runtime.unbacked_bounds_unsupported()
    if version >= (2, 13):
        assert why is None
    if version < (2, 12):
        assert why is not None and torch.__version__ in why
    cfg = compose(["data=text_documents", "dynamic=unbacked"], run_dir=str(tmp_path))
    if why is None:
        assert load(cfg).dynamic.policy.value == "unbacked"
    else:
        with pytest.raises(ConfigError, match=r"takes no lower bound.*Use dynamic=dynamic"):
            load(cfg)


# -- saved-tensor hooks traced into the graph ------------------------------------------------------
def test_pinned_saved_tensor_hook_internals() -> None:
    from torch._functorch._aot_autograd import graph_compile, utils

    from runner.config.schema import OffloadStrategy
    from runner.stack.offload.hooks import SavedTensorCodec

    assert callable(graph_compile._get_saved_tensor_hook_context)
    assert callable(utils.saved_tensors_hooks_are_inlineable)
    assert runtime.traced_saved_node() is None  # eagerly there is no traced node
    codec = SavedTensorCodec(OffloadStrategy.bf16.row.codec, 0, ())
    assert runtime.hooks_are_inlineable(codec.pack_gm, codec.unpack_gm)
    assert not runtime.hooks_are_inlineable(codec.pack, codec.unpack)
    assert runtime.memory_budget() == 1.0


# -- pins: the torch log records runner parses ------------------------------------------------------------
def test_pinned_convert_frame_records() -> None:
    hit = logging.LogRecord("torch._dynamo.convert_frame", logging.WARNING, "", 0,
                            "torch._dynamo hit config.%s (%s)\n   function: %s\n   last reason: %s\n", (
                                "recompile_limit", 8, "'g' (x.py:3)", "0/7: n == 7  # x.py:3 in g", "url"), None)
    assert errors.limit_hit_from_record(hit) == {"limit": "recompile_limit=8", "function": "'g' (x.py:3)",
                                             "reason": "0/7: n == 7  # x.py:3 in g"}
    fb = logging.LogRecord("torch._dynamo.convert_frame", logging.WARNING, "", 0,
                           "WON'T CONVERT g /a/x.py line 13 \ndue to: \nTraceback ...\n"
                           "torch._dynamo.exc.BackendCompilerFailed: backend='b' raised:\nValueError: boom", (), None)
    parsed = errors.fallback_from_record(fb)
    assert parsed is not None and parsed["function"] == "'g' (/a/x.py:13)" and "ValueError: boom" in parsed["reason"]


# -- process-wide settings ---------------------------------------------------------------------------
def test_torch_settings_restore_what_they_found(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    before_limit = torch._dynamo.config.recompile_limit
    s = torch_settings.TorchSettings()
    s.dynamo("recompile_limit", before_limit + 5)
    s.dynamo("recompile_limit", before_limit + 6)  # a second change still restores the first value
    s.inductor("triton.cudagraph_skip_dynamic_graphs", True)
    s.functorch("activation_memory_budget", 0.25)
    s.env("TORCHINDUCTOR_CACHE_DIR", "/tmp/x")
    prior_collectives = torch.compiler.set_enable_guard_collectives(False)
    s.guard_collectives(True)
    assert torch._dynamo.config.recompile_limit == before_limit + 6
    assert torch._inductor.config.triton.cudagraph_skip_dynamic_graphs is True
    assert torch._functorch.config.activation_memory_budget == 0.25
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/x"
    assert torch_settings.managed_settings()["guard_collectives"] is True
    s.restore()
    assert torch._dynamo.config.recompile_limit == before_limit
    assert torch._inductor.config.triton.cudagraph_skip_dynamic_graphs is False
    assert torch._functorch.config.activation_memory_budget == 1.0
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    assert torch_settings.managed_settings()["guard_collectives"] is False
    torch.compiler.set_enable_guard_collectives(prior_collectives)


def test_no_other_module_names_private_torch_compile_internals() -> None:
    """Only runner/torch_internals/ may reach into torch's private modules (torch._dynamo, torch._inductor,
    torch._functorch, torch._logging, torch.utils._*: imports or attribute access; docstrings may name them)."""
    import ast
    from pathlib import Path

    private = ("_dynamo", "_inductor", "_functorch", "_logging")
    root = Path(runtime.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        if "torch_internals" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
                names = [f"torch.{node.attr}"]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and \
                    isinstance(node.value.value, ast.Name) and node.value.value.id == "torch":
                names = [f"torch.{node.value.attr}.{node.attr}"]
            if any(n.split(".")[:2] in (["torch", p] for p in private) or
                   (n.startswith("torch.utils._")) for n in names):
                offenders.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    assert offenders == []


# -- Python state read inside a compiled step ----------------------------------------------------------
def test_dynamic_sources_make_an_nn_module_int_a_graph_input() -> None:
    """An int reached through an nn.Module is specialised (``== 3``, a recompile per value) unless its
    source name matches ``torch.compiler.config.dynamic_sources``; the pattern names Dynamo's ``L['x']``."""
    from torch._dynamo.utils import counters

    class Holder:
        step = 0

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.holder = Holder()

        def f(self, x: torch.Tensor, idx: int) -> torch.Tensor:
            return x * min(1.0, self.holder.step / 10) + idx

    m = M()
    settings = torch_settings.TorchSettings()
    before = torch.compiler.config.dynamic_sources
    pattern = torch_settings.local_source_pattern("self", r"\.holder\..*")
    assert pattern == r"L\['self'\]\.holder\..*"
    torch_settings.add_dynamic_sources(settings, [pattern, torch_settings.local_source_pattern("idx", "$")])
    torch_settings.add_dynamic_sources(settings, [pattern])  # idempotent
    assert torch.compiler.config.dynamic_sources.split(",")[-2:] == [pattern, r"L\['idx'\]$"]
    try:
        counters.clear()
        f = torch.compile(m.f, backend="eager")
        for i in range(4):  # 0 and 1 are not specialised either
            m.holder.step = i
            assert float(f(torch.ones(1), i)) == pytest.approx(min(1.0, i / 10) + i)
        assert counters["stats"]["unique_graphs"] == 1
    finally:
        settings.restore()
    assert torch.compiler.config.dynamic_sources == before


def test_structured_trace_writes_the_compile_and_detaches(tmp_path: Path) -> None:
    """What TORCH_TRACE writes, attached after import: a trace file naming the compiled frame; stop()
    removes the handler and restores the trace logger's level and propagation."""
    trace_log = logging.getLogger("torch.__trace")
    before = (trace_log.level, trace_log.propagate)
    stop = observation.start_structured_trace(str(tmp_path))
    try:
        torch.compile(_break_fn, backend="eager")(torch.randn(4))
    finally:
        path = stop()
    assert path is not None and str(tmp_path) in path
    text = Path(path).read_text()
    assert '"dynamo_start"' in text and "_break_fn" in text
    assert not [h for h in trace_log.handlers if getattr(h, "root_dir", None) == str(tmp_path)]
    assert (trace_log.level, trace_log.propagate) == before


def test_inductor_loads_and_its_memory_caches_empty() -> None:
    """``load_inductor`` imports the compiler torch loads at the first compile; ``clear_inductor_memory_caches``
    empties the in-process kernel cache (a compile process measures a fresh process's warm compile with it)."""
    import sys

    from torch._inductor.codecache import PyCodeCache

    runtime.load_inductor()
    assert "torch._inductor.compile_fx" in sys.modules
    PyCodeCache.load("def runner_pin() -> int:\n    return 1\n")
    assert PyCodeCache.modules
    runtime.clear_inductor_memory_caches()
    assert not PyCodeCache.modules


def test_cudagraph_tree_internals_are_pinned() -> None:
    """What ``cudagraph_tree_state`` and the recording count read of torch's CUDA-graph trees: the
    manager's ``current_gen`` and ``path_state`` (set in its ``__init__``; a manager needs CUDA), the
    generation a step mark starts, the execution states, and the recording callback's trigger name."""
    from torch._dynamo.callback import CallbackTrigger
    from torch._inductor import cudagraph_trees as ct

    init = inspect.getsource(ct.CUDAGraphTreeManager.__init__)
    assert "self.current_gen" in init and "self.path_state" in init
    assert ct.get_manager(0, create_if_none_exists=False) is None or torch.cuda.is_available()
    before = ct.CUDAGraphTreeManager.get_curr_generation()
    torch.compiler.cudagraph_mark_step_begin()
    assert ct.CUDAGraphTreeManager.get_curr_generation() == ct.MarkStepBox.mark_step_counter != before
    assert {s.name for s in ct.ExecutionState} >= {"NONE", "WARMUP", "RECORDING", "EXECUTION"}
    assert CallbackTrigger.CUDAGRAPH_RECORDING.name == observation.CUDAGRAPH_RECORDING_TRIGGER
    if not torch.cuda.is_available():
        assert observation.cudagraph_tree_state(0) is None  # no tree without CUDA


def test_remote_compile_cache_internals_are_pinned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What ``compile.cache`` turns on and reads: the two config keys, the Redis URL variable torch's client
    reads, the remote caches' classes and their hit/miss counts, and Inductor's cache directory."""
    import torch._functorch.config as functorch_config
    from torch._inductor import remote_cache

    assert hasattr(torch._inductor.config, "fx_graph_remote_cache")
    assert hasattr(functorch_config, "enable_remote_autograd_cache")
    assert caches.REDIS_URL_ENV in inspect.getsource(remote_cache.RedisRemoteCacheBackend.__init__)
    for name in ("RemoteFxGraphCache", "RemoteAOTAutogradCache"):
        assert issubclass(getattr(remote_cache, name), remote_cache.RedisRemoteCache)
    remote_cache.cache_stats.get("RemoteFxGraphCache", None)  # a miss, as torch counts one
    remote_cache.cache_stats.exception("RemoteFxGraphCache")
    hits, misses, failures = caches.remote_cache_stats()
    assert misses >= 1 and hits >= 0 and failures >= 1
    remote_cache.cache_stats._stats["RemoteFxGraphCache"].miss -= 1
    remote_cache.cache_stats._stats["RemoteFxGraphCache"].exception -= 1
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert caches.inductor_cache_dir() == tmp_path
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "cabc.so").write_bytes(b"")
    (tmp_path / "ab" / "cabc.main.so").write_bytes(b"")
    assert set(caches.cpu_kernel_files(tmp_path)) == {"ab/cabc.so", "ab/cabc.main.so"}


# -- CUDA-graph partitions (torch_internals.partitions) ------------------------------------------------------
def test_partition_decision_internals_are_pinned() -> None:
    """What the corrected symbol check and the partition count rely on: ``should_partition``'s symbol check is
    its last, with the reason text runner matches; ``graph_partition`` returns the partitions and signatures
    with ``skip_cudagraph``; the helpers they use exist; torch 2.15 filters the symbols itself."""
    from torch._guards import CompileContext
    from torch._inductor import codecache, graph, scheduler
    from torch.compiler import config as compiler_config

    source = inspect.getsource(scheduler.Scheduler.should_partition)
    tail = source[source.index("cudagraph_skip_dynamic_graphs"):]
    assert f'return "{partitions.DYNAMIC_SHAPE_REASON}"' in tail and tail.rstrip().endswith("return None")
    assert "get_scheduler_node_symbol_uses(node)" in tail
    assert "skip_cudagraph" in {f.name for f in dataclasses.fields(scheduler.GraphPartitionSignature)}
    assert "return partitions, signatures" in inspect.getsource(scheduler.Scheduler.graph_partition)
    assert callable(scheduler.get_scheduler_node_symbol_uses) and callable(CompileContext.current_compile_id)
    assert "self.is_backward = is_backward" in inspect.getsource(graph.GraphLowering.__init__)
    assert isinstance(compiler_config.cache_key_tag, str)
    assert "cache_key_tag" in inspect.getsource(codecache.FxGraphHashDetails)
    fixed_upstream = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 15)
    assert partitions.partition_check_counts_loop_indices() is not fixed_upstream


def test_partition_patches_are_restored() -> None:
    from torch._inductor import scheduler
    from torch.compiler import config as compiler_config

    should, graph_partition, tag = (scheduler.Scheduler.should_partition, scheduler.Scheduler.graph_partition,
                                    compiler_config.cache_key_tag)
    s = torch_settings.TorchSettings()
    patched = partitions.partition_on_graph_symbols_only(s)
    partitions.observe_graph_partitions(s, lambda g: None)
    assert patched is partitions.partition_check_counts_loop_indices()
    assert (scheduler.Scheduler.should_partition is not should) is patched
    assert scheduler.Scheduler.graph_partition is not graph_partition
    assert (partitions.FIX_TAG in compiler_config.cache_key_tag) is patched  # compiled code keyed apart
    s.restore()
    assert (scheduler.Scheduler.should_partition, scheduler.Scheduler.graph_partition,
            compiler_config.cache_key_tag) == (should, graph_partition, tag)


def test_shape_marks_are_the_attributes_the_mark_functions_set() -> None:
    """``copy_shape_marks`` copies ``SHAPE_MARKS``: every attribute a mark function sets is among them (besides
    ``mark_static_address``'s own), so a buffer standing in for a marked tensor compiles as it would."""
    t = torch.randn(2, 5, 3)
    before = set(vars(t))
    runtime.mark_dynamic(t, 1, min=2, max=None)
    runtime.maybe_mark_dynamic(t, 0)
    if runtime.unbacked_bounds_unsupported() is None:
        runtime.mark_unbacked(t, 2, min=2, max=None, shape_id="d2")
    torch._dynamo.mark_static(t, 2)
    set_by_marks = set(vars(t)) - before
    assert set_by_marks and set_by_marks <= set(runtime.SHAPE_MARKS), set_by_marks - set(runtime.SHAPE_MARKS)
    runtime.mark_static_address(t)
    assert set(vars(t)) - before - set(runtime.SHAPE_MARKS) == {"_dynamo_static_input_type"}


def test_remote_cache_client_internals_are_pinned() -> None:
    """What ``wrap_remote_cache_backend`` replaces: torch's Redis backend's ``_get``/``_put``, which catch a
    refused connection (and then drop ``_redis``) but not a timeout; AOTAutograd's remote save, which does not
    catch what they raise. Every Redis cache of torch reads and writes through that one backend (no other remote
    backend exists to wrap), AOTAutograd keeps its client in a ``functools.cache``, the per-kernel autotune cache
    (looked up in compile workers) has its own switch. The patch is put back by ``restore``."""
    import redis
    from torch._functorch._aot_autograd import autograd_cache
    from torch._inductor import remote_cache
    from torch._inductor.remote_cache import RedisRemoteCacheBackend as Backend

    for method in (Backend._get, Backend._put):
        source = inspect.getsource(method)
        assert "except redis.exceptions.ConnectionError" in source and "self._redis = None" in source
    assert "remote_cache.put(key, cache_data)" in inspect.getsource(autograd_cache.AOTAutogradCache.save)
    backends = {c for c in vars(remote_cache).values()
                if isinstance(c, type) and issubclass(c, remote_cache.RemoteCacheBackend)}
    local_files = getattr(remote_cache, "LocalCacheBackend", None)  # torch 2.13 on: the local autotune cache's files
    assert backends - {remote_cache.RemoteCacheBackend, local_files} == {Backend}
    assert "RedisRemoteCacheBackend(cache_id)" in inspect.getsource(remote_cache.RedisRemoteCache.__init__)
    assert callable(autograd_cache.AOTAutogradCache.get_remote_cache.cache_clear)
    assert hasattr(torch._inductor.config, "autotune_remote_cache")
    import socket

    class Passthrough:
        def seal(self, key: str, data: bytes) -> bytes:
            return data

        def open(self, key: str, stored: bytes) -> bytes | None:
            return stored

    silent = socket.create_server(("127.0.0.1", 0))  # accepts connections (the backlog) and never answers
    port = silent.getsockname()[1]
    backend = object.__new__(Backend)
    failures: list[str] = []
    s = torch_settings.TorchSettings()
    get, put = Backend._get, Backend._put
    caches.wrap_remote_cache_backend(s, failures.append, Passthrough())
    try:
        backend._redis = redis.Redis(port=port, socket_timeout=0.2)
        assert backend._get("k") is None and backend._redis is None  # unavailable from now on, as torch does it
        backend._redis = redis.Redis(port=port, socket_timeout=0.2)
        backend._put("k", b"v")
    finally:
        s.restore()
        silent.close()
    assert [f.split(":")[0] for f in failures] == ["TimeoutError", "TimeoutError"]
    assert (Backend._get, Backend._put) == (get, put)


@pytest.mark.slow
def test_cpu_kernel_internals_are_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the shared kernels rely on: a kernel's file is named by its ``CppCodeCache`` key, which this process
    lists once it compiled or loaded it, and a build holds ``locks/<key>.lock`` from start to finish."""
    from torch._inductor import codecache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert "FileLock(lock_path" in inspect.getsource(codecache._worker_compile_cpp)
    assert inspect.getsource(codecache.get_lock_dir).count('"locks"') == 1
    torch._dynamo.reset()
    f = torch.compile(lambda x: (x.sin() * 2).cumsum(0), backend="inductor")
    f(torch.randn(16))
    in_use = caches.cpu_kernels_in_use()
    files = caches.cpu_kernel_files(tmp_path)
    assert files and in_use and any(caches.kernel_key(name) in in_use for name in files)
    name = next(n for n in files if caches.kernel_key(n) in in_use)
    assert caches.read_kernel_locked(tmp_path, name, timeout_s=1.0) == files[name].read_bytes()
    from filelock import FileLock

    with FileLock(str(tmp_path / "locks" / f"{caches.kernel_key(name)}.lock")):  # a build in progress elsewhere
        import subprocess
        import sys

        held = subprocess.run([sys.executable, "-c", (
            "import sys; from pathlib import Path; from runner.torch_internals import caches; "
            f"print(caches.read_kernel_locked(Path({str(tmp_path)!r}), {name!r}, timeout_s=0.2))")],
            capture_output=True, text=True, env={**__import__("os").environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
        assert held.stdout.strip() == "None", held.stderr[-2000:]


def test_compile_events_register_torchs_callbacks_once_for_every_listener() -> None:
    """Four listeners of a fit (telemetry, CUDA graphs, the shape policy, the console) are one registration
    with torch; it goes when the last unsubscribes, and comes back after ``torch._dynamo.reset()``."""
    handler = torch._dynamo.callback_handler
    before = len(handler.start_callbacks)
    seen: list[list[str]] = [[], [], []]
    removes = [observation.COMPILE_EVENT_SOURCE.subscribe(lambda t, c, i=i: seen[i].append(t)) for i in range(3)]
    assert len(handler.start_callbacks) == before + 1
    torch.compile(lambda x: x + 1, backend="eager")(torch.randn(2))
    assert seen[0] == seen[1] == seen[2] == ["DYNAMO"]
    torch._dynamo.reset()  # clears torch's registry
    late = observation.COMPILE_EVENT_SOURCE.subscribe(lambda t, c: seen[0].append(t))
    torch.compile(lambda x: x * 2, backend="eager")(torch.randn(2))
    assert seen[0] == ["DYNAMO", "DYNAMO", "DYNAMO"] and seen[1] == ["DYNAMO", "DYNAMO"]
    for remove in [*removes, late]:
        remove()
    assert len(handler.start_callbacks) == 0 and observation.COMPILE_EVENT_SOURCE.listeners == 0


def test_a_fused_optimizer_skips_its_update_on_the_found_inf_flag() -> None:
    """The graph-safe optimizer step (runner.stack.optimizer.graphed) skips a non-finite step inside the fused
    kernel: on every supported torch, torch's fused AdamW, Adam and SGD leave parameters, state and step counts
    alone where the flag is 1, and update where it is 0. (SGD's momentum buffers are primed at zero first, as the
    step does: a fused SGD's first step makes them with ``empty_like`` and a skipped kernel never fills them.)"""
    from runner.stack.optimizer.graphed import prime_momentum

    for make in (lambda ps: torch.optim.AdamW(ps, lr=torch.tensor(0.1), fused=True),
                 lambda ps: torch.optim.Adam(ps, lr=torch.tensor(0.1), fused=True),
                 lambda ps: torch.optim.SGD(ps, lr=torch.tensor(0.1), momentum=0.9, fused=True)):
        p = torch.nn.Parameter(torch.ones(3))
        opt = make([p])
        p.grad = torch.ones(3)
        prime_momentum(opt)
        flag = torch.ones(())
        runtime.skip_update_on(opt, flag)
        opt.step()
        assert torch.equal(p.detach(), torch.ones(3)), type(opt).__name__
        assert all(not torch.is_tensor(v) or not v.any() for v in opt.state[p].values())
        flag.zero_()
        opt.step()
        assert not torch.equal(p.detach(), torch.ones(3)), type(opt).__name__
        runtime.zero_in_place([p.grad])
        assert p.grad is not None and not p.grad.any()


def test_torchaos_nf4_has_what_qlora_reads() -> None:
    """``nf4_module``: ``to_nf4`` and an ``NF4Tensor`` whose pieces runner keeps as buffers and rebuilds
    (``runner.peft.nf4``), with the constructor and dequantization it calls; a round trip on the CPU."""
    nf4 = torch_nf4.nf4_module()
    w = torch.randn(64, 256)
    q = nf4.to_nf4(w, 64, 256)
    pieces = ("quantized_data", "quantized_scalers", "quantization_factor", "scaler_mean", "nf4")
    assert all(isinstance(getattr(q, p), torch.Tensor) for p in pieces)
    assert q.quantized_data.dtype == torch.uint8 and q.quantized_data.numel() == w.numel() // 2
    meta = nf4.SubclassTensorArgs(w.shape, w.stride(), 0, w.dtype, w.device, False)
    again = nf4.NF4Tensor(meta, 64, w.numel() // 64, 256, q.quantized_scalers, q.quantization_factor, q.scaler_mean,
                          q.quantized_data, q.nf4)
    assert torch.equal(again.get_original_weight(), q.get_original_weight())
    assert torch_nf4.nf4_problem("cpu") is None


def test_auto_chunker_options_are_inductor_config_keys() -> None:
    """The auto-chunker's keys (the vocab benchmarks' runner_autochunk contestant) exist in Inductor's config."""
    import torch._inductor.config as inductor_config

    chunker = getattr(inductor_config, torch_settings.AUTO_CHUNKER)
    assert chunker.enable is False or chunker.enable is True
    for key, value in torch_settings.auto_chunker_options(chunks=4).items():
        section, name = key.split(".")
        assert section == torch_settings.AUTO_CHUNKER and hasattr(chunker, name), key
        with inductor_config.patch({key: value}):
            assert getattr(chunker, name) == value
