"""``benchmarks/compare.py`` and ``benchmarks/gpu.py`` run end to end (tiny sizes, ``--quick``) and
print/write their tables.

Structure only: timings are never asserted (the machine is shared and they drift).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_compare_quick_prints_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), "--quick", "--backend", "eager",
         "--models", "many_params", "overhead", "gpt_bf16", "--scopes", "step",
         "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path, timeout=900, check=False,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(scratch.iterdir()) == []  # caches, CSV logs and child processes' files are cleaned up
    text = proc.stdout
    for heading in ("## many_params:", "## overhead:", "## gpt_bf16:", "## compile time", "## targets"):
        assert heading in text
    assert "| contestant | median ms |" in text and "vs hand_loop" in text

    result = json.loads(out.read_text())
    assert {"machine", "method", "args", "models", "compile_cache", "targets"} <= result.keys()
    # The GPT in bf16 only: fp32 builds the same model, and each model is six more processes here
    assert set(result["models"]) == {"many_params", "overhead", "gpt_bf16"}
    # The framework-cost diagnostic: every tool's per-step cost over the hand loop, next to runner's gap.
    assert any(t.startswith("framework cost per step over the hand loop") and "runner_step +" in t
               and "many_params:" in t for t in result["targets"])
    # One scope here (each scope is one more process per model); the full run races all four.
    expected = {"lightning", "lightning_compile", "lightning_compile_fused", "hand_loop", "runner_step", "runner_cli"}
    bf16 = {"lightning", "lightning_compile", "lightning_compile_fused", "runner_step"}
    for name, model in result["models"].items():
        figs = model["contestants"]
        assert set(figs) == (bf16 if name == "gpt_bf16" else expected)
        for f in figs.values():
            assert f["median_ms"] > 0 and len(f["round_medians_ms"]) == 2
            assert set(f["ratio"]) == ({"lightning", "lightning_compile", "lightning_compile_fused"} | (
                set() if name == "gpt_bf16" else {"hand_loop"}))
        # Time in Lightning's callback hooks: none without Lightning; runner's CLI callbacks add to the
        # typical step's (the median: 4 steps here, and one stall inside a hook moves their mean by
        # more than the callbacks cost; CI once saw a 2.0 ms mean against a typical 0.2 ms).
        if name != "gpt_bf16":
            assert figs["hand_loop"]["hooks_ms"] == figs["hand_loop"]["hooks_median_ms"] == 0.0
            assert figs["runner_cli"]["hooks_median_ms"] > figs["runner_step"]["hooks_median_ms"] > 0.0
            assert figs["runner_step"]["hooks_ms"] > 0.0
        # Same seed, same batches, same optimizer hyper-parameters: every contestant trained the same model.
        losses = [f["eval_loss"] for f in figs.values()]
        assert max(losses) - min(losses) < 1e-3
    # Every target of the issue has its line: ratios, eval losses, telemetry cost, framework cost.
    lines = "\n".join(result["targets"])
    for needle in ("many_params: runner_step / lightning_compile_fused", "many_params: runner_step / hand_loop",
                   "many_params: eval loss", "many_params: telemetry and reliability callbacks cost",
                   "overhead: framework cost runner_step", "gpt_bf16: runner_step / lightning_compile_fused"):
        assert needle in lines, lines
    cache = result["compile_cache"]
    assert {"cold", "warm", "artifacts", "warm_over_cold"} <= cache.keys()
    assert cache["cold"]["artifact_bytes"] >= 0 and cache["warm"]["first_step_s"] > 0


def test_rounds_go_to_the_copies_in_turn() -> None:
    """With two processes per contestant, round r is copy r % 2's (r // 2)-th turn, after its warm-up."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from compare import round_times
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    warmup, turn = 2, 3
    # Each copy: 2 warm-up steps, then its turns; values name (copy, turn, step) so a wrong slice shows.
    runs = [[-1.0, -1.0, *(100 * copy + 10 * j + k for j in range(2) for k in range(turn)), 999.0]
            for copy in range(2)]
    got = [round_times(runs, r, warmup, turn) for r in range(4)]
    assert got == [[0, 1, 2], [100, 101, 102], [10, 11, 12], [110, 111, 112]]
    assert round_times(runs[:1], 1, warmup, turn) == [10, 11, 12]  # one copy: consecutive turns


def test_hook_time_leaves_out_the_turn_wait() -> None:
    """A tick inside a timed hook that waits for its turn: the wait is not callback time."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from contestants import Pacer
        from hook_clock import HookClock
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    class Turns:  # the driver's end of the pipe: each turn is handed out after a 0.3 s wait
        def send(self, message: object) -> None:
            pass

        def recv(self) -> int:
            time.sleep(0.3)
            return 2

    clock = HookClock()  # not installed: the test plays Lightning's dispatch itself
    pacer = Pacer(conn=Turns(), hooks=clock)

    def hook(work_s: float) -> None:  # what the installed wrapper times: the tick, then the callbacks
        start = time.perf_counter()
        clock.depth += 1
        pacer.tick()
        time.sleep(work_s)
        clock.depth -= 1
        clock.total += time.perf_counter() - start

    for _ in range(7):
        hook(0.01)
    assert len(pacer.hook_times) == 6
    # three waits of 0.3 s fell inside hooks (turns of 2 steps); none is counted as callback time
    assert all(0.01 <= t < 0.15 for t in pacer.hook_times), pacer.hook_times
    assert pacer.waited >= 0.9


@pytest.fixture(scope="module")
def gpu_quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """``benchmarks/gpu.py --quick`` once (about 1 min on 2 cores): its printed tables and its JSON."""
    tmp = tmp_path_factory.mktemp("gpu")
    out = tmp / "gpu.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


GPU_CONTESTANTS = ("lightning", "lightning_compile_fused", "lightning_compile_reduce_overhead", "runner_step",
                   "runner_cudagraphs", "runner_best")


def test_gpu_quick_measures_every_model_and_contestant(gpu_quick: tuple[str, dict[str, Any]]) -> None:
    text, result = gpu_quick
    assert {"device", "torch", "lightning", "date", "command", "rows"} <= result.keys()
    assert "--quick" in result["command"] and result["device"].startswith("cpu")
    rows = {(r["model"], r["contestant"]): r for r in result["rows"]}
    # --quick races one model: at its tiny size every model is the same GPT (the GPU run races them all)
    assert set(rows) == {("gpt_small", c) for c in GPU_CONTESTANTS}
    keys = {"step_ms", "tokens_per_s", "mfu", "compile_s", "peak_mem_gib", "cudagraph_recordings_after_warmup",
            "ratio_vs_lightning_compile_fused"}
    for (model, name), row in rows.items():
        assert keys <= row.keys(), (model, name)
        assert row["step_ms"] > 0 and row["tokens_per_s"] > 0 and row["compile_s"] >= 0
        assert row["compiles_after_warmup"] == 0  # every compile fell in the warm-up
        # On the CPU no CUDA graph exists and no CUDA memory is counted: null, not 0.
        assert row["cudagraph_recordings_after_warmup"] is None and row["peak_mem_gib"] is None
        assert row["cudagraph_partitions"] is None and row["cudagraph_eager_reasons"] is None
        assert row["ratio_vs_lightning_compile_fused"] > 0 and row["ratio_vs_lightning"] > 0
        assert row["mfu"] > 0  # against the CPU's fp32 matmul peak, probed in its own process
    assert rows[("gpt_small", "lightning_compile_fused")]["ratio_vs_lightning_compile_fused"] == 1.0
    # One table per model, each contestant's line ending in its two ratios.
    assert "## gpt_small: GPT 2x32" in text
    assert "| partitions in CUDA graphs | vs lightning_compile_fused | vs lightning |" in text
    for name in GPU_CONTESTANTS:
        lines = [ln for ln in text.splitlines() if ln.startswith(f"| {name} |")]
        assert len(lines) == 1, name
        for line in lines:
            assert all(float(cell) > 0 for cell in line.split("|")[-3:-1]), line


def test_gpu_benchmark_imports_no_hydra(gpu_quick: tuple[str, dict[str, Any]]) -> None:
    """The GPU machine has no Hydra or OmegaConf: the contestants' processes must not import them."""
    assert gpu_quick[1]["hydra_free"] is True, gpu_quick[1]["hydra_modules"]


def test_gpu_rows_take_each_ratio_within_a_round() -> None:
    """Ratios are medians of same-round ratios; compile_s is the first round's; a failed peer gives null ratios."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gpu import ROW_KEYS, summarize
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    def fig(ms: float, compile_s: float = 1.0) -> dict[str, Any]:
        return {"step_ms": ms, "tokens_per_step": 100, "flops_per_step": 1e9, "compile_s": compile_s,
                "peak_mem_gib": None, "cudagraph_recordings_after_warmup": None, "compiles_after_warmup": 0}

    runs = {"lightning": [fig(10), fig(20)], "lightning_compile_fused": [fig(5), fig(10)],
            "runner_step": [fig(4, 3.0), fig(9, 0.5)]}
    rows = {r["contestant"]: r for r in summarize("m", runs, peak=1.0)}
    r = rows["runner_step"]
    # Same-round ratios 0.8 and 0.9 (the ratio of the medians, 6.5 / 7.5, would be 0.867).
    assert r["ratio_vs_lightning_compile_fused"] == pytest.approx(0.85)
    assert r["ratio_vs_lightning"] == pytest.approx(0.425)
    assert r["step_ms"] == pytest.approx(6.5) and r["tokens_per_s"] == pytest.approx(100 / 6.5e-3)
    assert r["mfu"] == pytest.approx(1e9 / 6.5e-3 / 1e12)
    assert (r["compile_s"], r["compile_warm_s"]) == (3.0, 0.5)
    runs["lightning"][1] = {"error": "exit 1: boom"}
    rows = {r["contestant"]: r for r in summarize("m", runs, peak=None)}
    assert all(rows["lightning"][k] is None for k in ROW_KEYS) and rows["lightning"]["error"] == "exit 1: boom"
    assert rows["runner_step"]["ratio_vs_lightning"] is None and rows["runner_step"]["mfu"] is None


def test_shape_agreement_quick_measures_every_variant() -> None:
    """Two gloo ranks, each variant of the step timed in the same processes; after the first change is
    agreed on, no step exchanges shapes again."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "shape_agreement.py"), "--ranks", "2", "--quick"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert all(float(c) > 0 for c in cells[1:5])  # none, int all-reduce, agreement, all_gather_object [ms]
    assert cells[-1] == "0"  # exchanges after the dim was agreed dynamic


@pytest.mark.slow
def test_remote_cache_quick_compiles_the_shared_process_from_the_server() -> None:
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian's redis-server package; .ci/run installs it)")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "remote_cache.py"), "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.strip("|").split("|")]
            for ln in proc.stdout.splitlines() if ln.startswith("| ") and "---" not in ln and "process" not in ln}
    assert set(rows) == {"cold", "shared", "local warm"}
    # process, compile, vs cold, first step, hits, misses, kernels fetched, kernels shared, entries rejected
    assert rows["cold"][4:] == ["0", rows["cold"][5], "0", rows["shared"][6], "0"] and int(rows["cold"][5]) > 0
    assert rows["shared"][5] == "0" and rows["shared"][7] == "0" and int(rows["shared"][6]) > 0
    assert rows["shared"][8] == "0"  # every entry it read verified
    assert "every entry signed: yes" in proc.stdout and "Signing cost: the server's" in proc.stdout


@pytest.mark.slow
def test_step_host_quick_times_every_contestant_against_lightning() -> None:
    """``benchmarks/step_host.py --quick``: runner's whole fit, runner with nothing compiled, plain Lightning
    with the same features and the model's own loop, each timed per quiet step, with per-round ratios."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "step_host.py"), "--quick", "--rounds", "1",
                           "--steps", "50"], capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert {"model", "lightning", "runner_eager", "runner"} <= rows.keys()
    for name in ("runner", "runner_eager"):
        assert float(rows[name].split("|")[2]) > 0 and float(rows[name].split("|")[4]) > 0
