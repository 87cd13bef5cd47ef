"""Shared fixtures: a clean Dynamo between tests, GPU tests skipped without CUDA, the fast tier's guard, the
order files are handed to ``make test``'s workers in (longest first), the compiler Inductor builds kernels with
(``tests/cxx/g++``: an identical build is done once per run), and OpenMP threads that sleep when idle.

``make test-fast`` (``RUNNER_TEST_TIER=fast``, ``-m "not slow"``) is the tier to run while working: it must
start no process and compile nothing with Inductor. Rather than trust the markers, the guard below makes
either one fail the test that does it, naming the fix (mark it ``slow``), so the tier stays what it says.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Before torch: Inductor reads CXX when its config is imported. Kernels g++ has built once are reused for the rest
# of the run (tests/cxx/g++ says how and why); this process and every one the tests start compile through it.
_CXX = shutil.which(os.environ.get("CXX", "g++"))
# Only in front of a g++ (Inductor chooses flags by the compiler's name, and the wrapper is named g++).
if "RUNNER_TEST_CXX_CACHE" not in os.environ and _CXX and "g++" in Path(_CXX).name and "clang" not in _CXX:
    os.environ["RUNNER_TEST_CXX"] = _CXX
    os.environ["RUNNER_TEST_CXX_CACHE"] = tempfile.mkdtemp(prefix="runner-test-kernels-")
    os.environ["CXX"] = str(Path(__file__).resolve().parent / "cxx" / "g++")

# Before torch too: OpenMP reads it when torch loads it. Two workers share two cores, and by default each process's
# idle OpenMP threads spin between parallel regions on the core the other worker needs; with this they sleep.
# Thread counts and the kernels Inductor generates stay as they are (measured in docs/testing.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

os.environ.setdefault("WANDB_MODE", "offline")
# The MFU peak probe caches per machine; tests (and the processes they start) keep theirs out of ~/.cache.
os.environ.setdefault("RUNNER_CACHE_DIR", tempfile.mkdtemp(prefix="runner-test-cache-"))
# datasets' cache (prepared tables, runner's token ids) too: tests never read or fill ~/.cache/huggingface.
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="runner-test-datasets-"))
# No test reaches the real Hub, nor the user's Hugging Face cache: a Hub test starts its loopback Hub
# (tests/hub_server.py) and gives its processes HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE=0 itself.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="runner-test-hf-home-"))


FAST_TIER = os.environ.get("RUNNER_TEST_TIER") == "fast"
_violations: list[str] = []
"""What the running test did that the fast tier forbids (filled by the guards, checked after each test)."""


def _install_fast_tier_guard() -> None:
    """Make starting a process (subprocess, multiprocessing) or an Inductor compile a recorded violation; a
    process start also raises at once, since it would cost what the tier exists to avoid."""
    import multiprocessing.process
    import subprocess

    import torch._inductor.compile_fx as compile_fx_module

    compile_fx = compile_fx_module.compile_fx

    def no_process(*args: object, **kwargs: object) -> None:
        _violations.append("started a process")
        raise RuntimeError("the fast tier (make test-fast) starts no process: mark this test @pytest.mark.slow")

    def noted_compile_fx(*args: object, **kwargs: object) -> object:
        _violations.append("compiled a graph with Inductor")
        return compile_fx(*args, **kwargs)

    subprocess.Popen.__init__ = no_process  # type: ignore[method-assign,assignment]
    multiprocessing.process.BaseProcess.start = no_process  # type: ignore[method-assign,assignment]
    compile_fx_module.compile_fx = noted_compile_fx


@pytest.fixture(scope="session", autouse=True)
def _fast_tier() -> None:
    """Installed where tests run (in each xdist worker, not in the controller, which starts the workers)."""
    if FAST_TIER:
        _install_fast_tier_guard()


@pytest.fixture(autouse=True)
def _fast_tier_guard(_fast_tier: None) -> Iterator[None]:
    """In the fast tier, fail a test that started a process or compiled with Inductor (module docstring)."""
    _violations.clear()
    yield
    if FAST_TIER and _violations:
        pytest.fail(f"the fast tier (make test-fast) starts no process and compiles nothing with Inductor, but this "
                    f"test {' and '.join(dict.fromkeys(_violations))}: mark it @pytest.mark.slow (make test runs it) "
                    "or use the eager/aot_eager backend in-process.", pytrace=False)


LONGEST_FIRST = (
    "test_hf_stack", "test_benchmarks", "test_idioms", "test_fsdp", "test_install", "test_peft_processes",
    "test_offload", "test_reliability_sigkill", "test_remote_cache", "test_gpu_benchmark", "test_strategy",
    "test_suggested_overrides", "test_first_run", "test_reliability_cache", "test_background_compile",
    "test_reliability_failures", "test_reliability_resume", "test_gpu_path", "test_peft_stack", "test_nonfinite_ddp",
    "test_bad_input", "test_no_leak", "test_cli", "test_readme", "test_ddp", "test_hf_models",
    "test_reliability_runs", "test_own_trainer", "test_family_benchmark", "test_dynamic_ddp", "test_instruct_run",
    "test_packing_processes", "test_cudagraph_partitions", "test_checkpoint", "test_after_resume",
    "test_summary_consistency",
)
"""The test files that take longest under ``make test`` (``--junitxml``, 2-core CPU, 2026-11-28), longest first.
``make test`` hands whole files to its two workers in collection order (``--dist loadfile --no-loadscope-reorder``):
starting with the longest leaves short files to fill the end, instead of one long file running alone there. A file
missing here only runs later; the order changes no result."""


def _schedule_longest_first(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: a file's own order is kept


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many kernel builds tests/cxx/g++ ran and how many it reused (the controller sees both workers')."""
    cache = os.environ.get("RUNNER_TEST_CXX_CACHE")
    if cache and (calls := Path(cache, "calls")).exists():
        marks = calls.read_text()
        terminalreporter.write_line(f"Inductor kernels: {marks.count('b')} built with g++, {marks.count('r')} "
                                    "reused from an identical build earlier in this run (tests/cxx/g++)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _schedule_longest_first(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (gpu marker)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Each test starts with empty compile caches, counters and default stance."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()
