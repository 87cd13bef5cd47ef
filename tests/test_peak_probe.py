"""The MFU peak: measured on the run's device by a short matmul probe, cached per machine, or given.

The probe runs for real on this CPU (a fraction of a second); the cache lives in ``tmp_path``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from runner.telemetry.peak import (
    CACHE_ENV,
    CACHE_FILE,
    Peak,
    cache_dir,
    cache_key,
    mfu_figures,
    probe_dtype,
    resolve_peak,
)

CPU = torch.device("cpu")


def test_measured_peak_is_positive_then_cached_per_key(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    first = resolve_peak(CPU, "32-true", None, cache=tmp_path)
    probe_s = time.perf_counter() - t0
    assert first is not None and first.source == "measured" and first.tflops > 0
    assert probe_s < 5  # a short probe (0.5 s budget; generous for a busy machine)
    stored = json.loads((tmp_path / CACHE_FILE).read_text())
    assert stored[cache_key(CPU, torch.float32)]["tflops"] == first.tflops

    again = resolve_peak(CPU, "32-true", None, cache=tmp_path)
    assert again == Peak(first.tflops, "cached")  # the same number, not measured again
    # Another precision is another dtype: measured for itself, kept beside the first.
    bf16 = resolve_peak(CPU, "bf16-mixed", None, cache=tmp_path)
    assert bf16 is not None and bf16.source == "measured"
    assert set(json.loads((tmp_path / CACHE_FILE).read_text())) == {
        cache_key(CPU, torch.float32), cache_key(CPU, torch.bfloat16)}


def test_the_key_holds_what_changes_the_rate() -> None:
    key = cache_key(CPU, torch.bfloat16)
    assert "bfloat16" in key and torch.__version__ in key and f"{torch.get_num_threads()} threads" in key
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert cache_key(CPU, torch.bfloat16) != key  # another thread count: measured again
    finally:
        torch.set_num_threads(before)


def test_given_peak_wins_over_cache_and_probe(tmp_path: Path) -> None:
    (tmp_path / CACHE_FILE).write_text(json.dumps({cache_key(CPU, torch.float32): {"tflops": 9.0}}))
    assert resolve_peak(CPU, "32-true", 1.5, cache=tmp_path) == Peak(1.5, "given")
    assert resolve_peak(CPU, "32-true", None, cache=tmp_path) == Peak(9.0, "cached")


def test_damaged_cache_is_measured_again(tmp_path: Path) -> None:
    (tmp_path / CACHE_FILE).write_text("{not json")
    peak = resolve_peak(CPU, "32-true", None, cache=tmp_path)
    assert peak is not None and peak.source == "measured"
    assert json.loads((tmp_path / CACHE_FILE).read_text())[cache_key(CPU, torch.float32)]["tflops"] == peak.tflops


def test_cache_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "runner"


def test_probe_dtype_follows_the_trainer_precision() -> None:
    assert probe_dtype("bf16-mixed") is torch.bfloat16 and probe_dtype("bf16-true") is torch.bfloat16
    assert probe_dtype("16-mixed") is torch.float16
    assert probe_dtype("32-true") is torch.float32 and probe_dtype(None) is torch.float32


def test_mfu_never_exceeds_one_against_a_measured_peak() -> None:
    """A measured or cached peak is what the device was seen to do; a run that did more proves the
    probe ran under load, and its own rate becomes the bound, with no MFU (its rate over itself would say 1 whatever
    it did: issue 75's "MFU 1" on the CPU). A given peak is kept as given."""
    assert mfu_figures(0.5e12, Peak(1.0, "measured")) == {
        "perf/mfu": 0.5, "perf/peak_tflops": 1.0, "perf/peak_source": "measured"}
    over = mfu_figures(2e12, Peak(1.0, "cached"))
    assert "perf/mfu" not in over and over["perf/peak_tflops"] == 2.0
    assert over["perf/peak_source"].startswith("achieved by this run") and "no MFU" in over["perf/peak_source"]
    assert mfu_figures(2e12, Peak(1.0, "given"))["perf/mfu"] == 2.0
    assert mfu_figures(1e12, None) == {}


def test_a_device_the_probe_cannot_time_gets_no_guess(tmp_path: Path) -> None:
    assert resolve_peak(torch.device("meta"), "32-true", None, cache=tmp_path) is None
    assert resolve_peak(torch.device("meta"), "32-true", 2.0, cache=tmp_path) == Peak(2.0, "given")
    assert not (tmp_path / CACHE_FILE).exists()


def test_a_cached_peak_a_run_beat_is_forgotten(tmp_path: Path) -> None:
    """A peak cached on a busy machine must not stay forever: once a run beats it, it is dropped."""
    from runner.telemetry.peak import CACHE_FILE, cache_key, forget_peak, probe_dtype

    cpu = torch.device("cpu")
    path = tmp_path / CACHE_FILE
    path.write_text(json.dumps({cache_key(cpu, probe_dtype("32-true")): {"tflops": 1e-6}}))
    assert resolve_peak(cpu, "32-true", None, cache=tmp_path).source == "cached"
    forget_peak(cpu, "32-true", cache=tmp_path)
    assert json.loads(path.read_text()) == {}
