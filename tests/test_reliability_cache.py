"""Compile caches across real processes (Inductor, so ``slow``): a cold run fills ``compile.cache_dir``
and saves torch's cache artifacts with the run, signed under the secret every run holds; a second run on the
same directory hits the cache; a third run on an empty directory hits it too after loading the first run's
artifacts (another run's: they load because they verify under the same secret).

The runs keep saved activations in bf16 (``offload=bf16``): the cold run traces the hooks into its graphs
(path ``traced``); the warm run loads those graphs from AOTAutograd's cache and calls no hook, so its live counts
alone would say ``none`` for graphs that pack: its report says ``cached``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_reliability_support import run

INDUCTOR = ["compile.backend=inductor", "compile.optimizer=none", "trainer.max_steps=2",
            "trainer.val_check_interval=2", "compile.background=disabled",  # the run's own compile fills the cache
            "offload=bf16", "offload.measure=false"]  # the path the run took, not a measurement's


def _report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


@pytest.mark.slow
def test_cache_dir_warm_run_and_artifacts_loaded_by_another_run(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNNER_COMPILE_CACHE_SECRET", "the-secret-every-run-holds-0123456789")
    cache_a, cache_b = tmp_path / "cache_a", tmp_path / "cache_b"
    cold = run(tmp_path / "cold", *INDUCTOR, f"compile.cache_dir={cache_a}")
    assert cold.returncode == 0, cold.stderr[-4000:]
    cold_report = _report(tmp_path / "cold")
    assert cold_report["compile/cache_misses"] > 0
    artifacts = tmp_path / "cold" / "compile_cache" / "artifacts.bin"
    assert artifacts.exists() and cold_report["compile/cache_artifacts_saved"] == str(artifacts)
    info = json.loads(artifacts.with_suffix(".json").read_text())
    assert info["inductor_artifacts"] > 0 and info["signed"] is True
    assert any(cache_a.iterdir()), "the configured cache_dir was not used"
    assert cold_report["offload/path"] == "traced" and cold_report["offload/traced_packed"] > 0

    warm = run(tmp_path / "warm", *INDUCTOR, f"compile.cache_dir={cache_a}",
               "reliability.save_cache_artifacts=false")
    assert warm.returncode == 0, warm.stderr[-4000:]
    warm_report = _report(tmp_path / "warm")
    assert warm_report["compile/cache_hits"] > 0
    assert warm_report["compile/cache_misses"] == 0
    assert warm_report["offload/path"] == "cached" and warm_report["offload/active"] is True
    assert warm_report.get("offload/traced_packed", 0) == 0  # nothing traced: the graphs came from the cache

    loaded = run(tmp_path / "loaded", *INDUCTOR, f"compile.cache_dir={cache_b}",
                 f"reliability.load_cache_artifacts={tmp_path / 'cold'}")
    assert loaded.returncode == 0, loaded.stderr[-4000:]
    loaded_report = _report(tmp_path / "loaded")
    assert loaded_report["compile/cache_artifacts_loaded"]["inductor_artifacts"] > 0
    assert loaded_report["compile/cache_hits"] > 0
    print(f"cold compile {cold_report['compile/time_s']:.1f} s, warm {warm_report['compile/time_s']:.1f} s, "
          f"from artifacts {loaded_report['compile/time_s']:.1f} s")
