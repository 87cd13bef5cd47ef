"""The device's peak FLOP/s for MFU: measured on the run's device at start-up, or given by the user.

A datasheet number is wrong on every other machine, so the peak is a short dense-matmul probe in the run's dtype,
cached per machine in ``<cache dir>/peak_tflops.json`` keyed by what changes the rate."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from runner.atomic_files import atomic_write_bytes

log = logging.getLogger(__name__)

CACHE_ENV = "RUNNER_CACHE_DIR"
CACHE_FILE = "peak_tflops.json"


@dataclass(frozen=True)
class Peak:
    """A peak for MFU and where it came from: ``measured`` now, ``cached`` from an earlier
    measurement on this machine, or ``given`` by the user (``telemetry.peak_tflops``)."""

    tflops: float
    source: str


def probe_dtype(precision: str | None) -> torch.dtype:
    """The dtype the run's matmuls use, from Lightning's precision (``32-true``, ``bf16-mixed``...)."""
    prefixes = (("bf16", torch.bfloat16), ("16", torch.float16), ("64", torch.float64))
    return next((dtype for prefix, dtype in prefixes if str(precision or "32").startswith(prefix)), torch.float32)


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "runner"


def device_name(device: torch.device) -> str:
    """The device model: the GPU's name, or the CPU's model name (``/proc/cpuinfo`` on Linux)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        with contextlib.suppress(OSError):
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
        return platform.processor() or platform.machine() or "cpu"
    return device.type


def cache_key(device: torch.device, dtype: torch.dtype) -> str:
    """What the peak depends on besides the hardware: a change in any of these re-measures."""
    parts = [device.type, device_name(device), str(dtype).removeprefix("torch."), f"torch {torch.__version__}",
             f"matmul {torch.get_float32_matmul_precision()}"]
    if device.type == "cpu":
        parts.append(f"{torch.get_num_threads()} threads")
    return " | ".join(parts)


def _timed_group(device: torch.device, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, inner: int) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            torch.mm(a, b, out=out)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    t0 = time.perf_counter()
    for _ in range(inner):
        torch.mm(a, b, out=out)
    return time.perf_counter() - t0


def measure_tflops(device: torch.device, dtype: torch.dtype, budget_s: float = 0.5, reps: int = 5,
                   max_n: int | None = None) -> float:
    """The device's steady-state dense matmul rate in TFLOP/s (see the module docstring)."""
    max_n = max_n or (8192 if device.type == "cuda" else 4096)
    deadline: float | None = None
    best, n = 0.0, 256
    # A CUDA matmul of a small size takes microseconds, less than its launch: time groups of them.
    inner = 8 if device.type == "cuda" else 1
    while True:  # n x n matmuls, the best of ``reps`` after one warm-up
        a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        out = torch.empty(n, n, device=device, dtype=dtype)
        _timed_group(device, a, b, out, 1)  # warm-up: handles, caches, clocks
        rep_s = min(_timed_group(device, a, b, out, inner) for _ in range(reps))
        best = max(best, 2.0 * n**3 * inner / rep_s if rep_s > 0 else 0.0)
        # The budget starts after the first size: that one also pays one-off library initialisation.
        deadline = deadline or time.perf_counter() + budget_s
        # The next size does 8x the work per repetition: go there only if it still fits the budget.
        # No early stop when the rate stops growing: on a shared machine one size can measure low.
        if n >= max_n or time.perf_counter() + 8 * rep_s * (reps + 1) > deadline:
            break
        n *= 2
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the probe's buffers are not the run's
        reset_memory_peak(device)
    return best / 1e12


def reset_memory_peak(device: torch.device) -> None:
    """Start ``memory/peak_gib`` anew (the build, the MFU probe and the strategy's setup are not the run's peak):
    CUDA's peak allocated, or on Linux the process's ``VmHWM``."""
    if device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.init()  # resetting before CUDA is initialised raises "Invalid device argument"
        torch.cuda.reset_peak_memory_stats(device)
    elif device.type == "cpu":
        with contextlib.suppress(OSError):  # not Linux, or a /proc that does not allow it: the process's peak
            Path("/proc/self/clear_refs").write_text("5")


def _read(path: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # no cache yet, or a damaged one: measure again
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict[str, dict[str, object]]) -> None:
    """Atomically (several ranks or runs may write at once); a read-only home only loses the cache."""
    try:
        atomic_write_bytes(json.dumps(data, indent=1, sort_keys=True).encode(), path, one_writer=False)
    except OSError as exc:
        log.debug("could not cache the measured peak in %s: %s", path, exc)


def resolve_peak(device: torch.device, precision: str | None, given: float | None,
                 cache: Path | None = None, budget_s: float = 0.5) -> Peak | None:
    """The peak for MFU: ``given`` if set, else the cached measurement for this machine, else a new
    measurement (then cached). None when the device cannot be probed (MFU is then not reported)."""
    if given is not None:
        return Peak(float(given), "given")
    if device.type not in ("cpu", "cuda"):
        # The probe times a CPU with the host clock and a GPU with CUDA events; others are not timed
        # right by either: no guess, no MFU (give telemetry.peak_tflops to get one).
        log.warning("MFU not reported: no peak probe for %s devices; set telemetry.peak_tflops", device.type)
        return None
    dtype = probe_dtype(precision)
    path = (cache or cache_dir()) / CACHE_FILE
    try:
        key = cache_key(device, dtype)
    except (RuntimeError, AssertionError) as exc:  # a device torch cannot name (no driver...)
        log.warning("MFU not reported: cannot identify device %s (%s)", device, exc)
        return None
    entry = _read(path).get(key)
    cached = entry.get("tflops") if isinstance(entry, dict) else None
    if isinstance(cached, (int, float)) and cached > 0:
        return Peak(float(cached), "cached")
    try:
        tflops = measure_tflops(device, dtype, budget_s=budget_s)
    except RuntimeError as exc:  # e.g. a dtype the device has no matmul kernel for
        log.warning("MFU not reported: the matmul probe failed on %s in %s (%s)", device, dtype, exc)
        return None
    if tflops <= 0:
        return None
    data = _read(path)  # re-read: another rank or run may have added keys meanwhile
    data[key] = {"tflops": tflops, "measured": time.strftime("%Y-%m-%dT%H:%M:%S")}
    _write(path, data)
    return Peak(tflops, "measured")


def forget_peak(device: torch.device, precision: str | None, cache: Path | None = None) -> None:
    """Drop this machine's cached peak (a run beat it: it was measured on a busy machine), so the next
    run measures again instead of reusing a low value forever."""
    path = (cache or cache_dir()) / CACHE_FILE
    try:
        key = cache_key(device, probe_dtype(precision))
    except (RuntimeError, AssertionError):
        return
    data = _read(path)
    if data.pop(key, None) is not None:
        _write(path, data)


# ``perf/peak_source`` when the run did more than the measured peak.
ACHIEVED = "achieved by this run, above the probe's (which ran while the machine was busy): no MFU"


def mfu_figures(achieved_flops: float, peak: Peak | None) -> dict[str, Any]:
    """``perf/mfu`` and the peak it is against. A run faster than a measured peak means the probe ran on a busy
    machine: then the run's rate is the peak (source ``achieved``) and there is no MFU. A given peak is kept."""
    if peak is None or achieved_flops <= 0:
        return {}
    if peak.source != "given" and achieved_flops > peak.tflops * 1e12:
        return {"perf/peak_tflops": achieved_flops / 1e12, "perf/peak_source": ACHIEVED}
    return {"perf/mfu": achieved_flops / (peak.tflops * 1e12), "perf/peak_tflops": peak.tflops,
            "perf/peak_source": peak.source}
