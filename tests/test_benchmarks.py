"""``benchmarks/compare.py`` and the other CPU benchmarks run end to end (tiny sizes, ``--quick``) and
print/write their tables (``benchmarks/gpu.py``: ``tests/test_gpu_benchmark.py``).

Structure only: timings are never asserted (the machine is shared and they drift).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_compare_quick_prints_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    # TMPDIR of its own, but shorter than pytest's tmp_path: the fork server's socket lives there (AF_UNIX paths
    # end at 107 bytes).
    with tempfile.TemporaryDirectory(prefix="bench-tmp-") as scratch:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "compare.py"), "--quick", "--backend", "eager",
             "--models", "many_params", "gpt_bf16", "--scopes", "step",
             "--out", str(out)],
            capture_output=True, text=True, cwd=tmp_path, timeout=900, check=False,
            env={**os.environ, "TMPDIR": scratch},
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert list(Path(scratch).iterdir()) == []  # caches, CSV logs and child processes' files are cleaned up
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "spawned interpreters" not in proc.stderr  # the contestants were forked from the preloaded server
    text = proc.stdout
    for heading in ("## many_params:", "## gpt_bf16:", "## compile time", "## targets"):
        assert heading in text
    assert "| contestant | median ms |" in text and "vs hand_loop" in text

    result = json.loads(out.read_text())
    assert {"machine", "method", "args", "models", "compile_cache", "targets"} <= result.keys()
    # The GPT in bf16 only: fp32 builds the same model, and each model is six more processes here (so is the
    # overhead model, many_params' workload at other sizes: its own lines are rendered from the run of record below)
    assert set(result["models"]) == {"many_params", "gpt_bf16"}
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
                   "gpt_bf16: runner_step / lightning_compile_fused"):
        assert needle in lines, lines
    cache = result["compile_cache"]
    assert {"cold", "warm", "artifacts", "warm_over_cold"} <= cache.keys()
    assert cache["cold"]["artifact_bytes"] >= 0 and cache["warm"]["first_step_s"] > 0


def test_the_run_of_record_renders_every_target_with_the_overhead_models_framework_cost() -> None:
    """``compare.py --render`` on the committed full run (benchmarks/results/compare.json, every model): the tables
    and each target line, the overhead model's framework cost among them (every tool's per-step cost over the hand
    loop, next to runner's gap on the other models), computed again from the run's figures."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from harness.race import add_ratios
        from reports.compare import report, targets
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    result = json.loads((ROOT / "benchmarks" / "results" / "compare.json").read_text())
    for m in result["models"].values():  # what --render does (compare.main), without its process-wide settings
        add_ratios(m["contestants"])
    result["targets"] = targets(result, "runner_step")
    text = report(result, "runner_step")
    models = result["models"]
    assert set(models) >= {"many_params", "overhead"}
    for name in models:
        assert f"## {name}:" in text
    (cost,) = [ln for ln in text.splitlines() if "framework cost per step over the hand loop" in ln]
    assert "overhead model: lightning +" in cost and "runner_step +" in cost and "many_params:" in cost
    assert "- overhead: framework cost runner_step" in text and "vs lightning_compile_fused" in text
    assert "many_params: telemetry and reliability callbacks cost" in text


def test_rounds_go_to_the_copies_in_turn() -> None:
    """With two processes per contestant, round r is copy r % 2's (r // 2)-th turn, after its warm-up."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from harness.race import round_times
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
        from contestants.pacer import Pacer
        from harness.hook_clock import HookClock
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


@pytest.mark.slow
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
def test_step_host_quick_times_runner_against_lightning() -> None:
    """``benchmarks/step_host.py``'s plumbing, one contestant pair over 30 steps (two processes, seconds; all four
    contestants once ran past this test's limit on a loaded machine, issue 85): runner's whole fit and plain
    Lightning with the same features, each timed per quiet step, with the per-round ratio."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "step_host.py"), "--quick", "--rounds", "1",
                           "--steps", "30", "--contestants", "runner"], capture_output=True, text=True, cwd=ROOT,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:5] for line in proc.stdout.splitlines()
            if line.startswith("| ")}
    assert rows.keys() == {"contestant", "lightning", "runner"}, proc.stdout  # the header and the pair
    step, rest, ratio = rows["runner"]
    assert float(step) > 0 and rest.strip() == "-" and float(ratio) > 0  # no model raced: no "the rest"
    assert float(rows["lightning"][2]) == 1
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "step_host.py"), "--contestants", "runnr"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert bad.returncode == 2 and "no contestant runnr; the contestants are model, lightning" in bad.stderr


@pytest.mark.slow
def test_packing_quick_races_every_contestant_on_instruction_data(tmp_path: Path) -> None:
    """``benchmarks/packing.py --quick`` on the instruction distribution (the stdlib one runs in ``gpu.py
    --quick``'s ``packing`` workload, the same race): every contestant's row, the ratios and the targets' lines."""
    out = tmp_path / "packing.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "packing.py"), "--quick", "--backend", "eager",
                           "--dists", "instruct", "--out", str(out)], capture_output=True, text=True, cwd=ROOT,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["contestant"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == ["lightning", "lightning_compile", "runner_bucket", "runner_packed"]
    assert all("error" not in r and r["steps"] == 5 and r["real_tokens_per_s"] > 0 for r in rows.values()), rows
    assert rows["runner_packed"]["recompiles"] == 0 and rows["runner_bucket"]["recompiles"] == 0
    assert "instruct: runner_packed / runner_bucket real tokens/s = " in proc.stdout
    assert "| instruct | runner_packed |" in proc.stdout


@pytest.mark.slow
def test_dpo_quick_races_runner_against_trl_where_trl_is(tmp_path: Path) -> None:
    """``benchmarks/dpo.py --quick``: each contestant its own program, taking turns over a pipe. TRL is not in the
    test environment (its own venv races it: ``--trl-python``), so runner's three contestants race, and the targets
    say TRL was not raced."""
    out = tmp_path / "dpo.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dpo.py"), "--quick", "--trl-python",
                           str(tmp_path / "no-trl" / "python"), "--out", str(out)], capture_output=True, text=True,
                          cwd=ROOT, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    figs = result["contestants"]
    assert list(figs) == ["runner_padded_eager", "runner_padded", "runner_packed"] and result["trl"] is None
    for f in figs.values():
        assert f["pairs_per_s"] > 0 and f["measured"]["recompiles_after_warmup"] == 0
        assert f["measured"]["graph_breaks"] == 0 and len(f["round_medians_ms"]) == 2
    assert figs["runner_packed"]["measured"]["graphs"] == 1  # one shape: one graph
    assert figs["runner_padded_eager"]["measured"]["graphs"] == 0  # compile.scope=none: nothing compiled
    assert result["targets"] == ["TRL was not raced (no --trl-python): the pairs/s target is unmeasured"]
    assert "| runner objective=dpo peft=lora, packed pairs |" in proc.stdout


@pytest.mark.slow
def test_vocab_quick_races_whole_and_chunked_logits_and_finds_the_largest_batch(tmp_path: Path) -> None:
    """``benchmarks/vocab.py --quick`` with LoRA (HF peft in Lightning, runner's adapter in runner): every contestant
    in its own process, eager Lightning first, runner's chunked loss chunked (4 chunks) and training the same model
    as the whole logits (the same eval loss), then each ladder contestant's largest batch under the cap."""
    out = tmp_path / "vocab.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vocab.py"), "--quick", "--configs", "4096_lora",
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    race = result["races"]["vocab_4096_lora"]
    assert list(race) == ["lightning", "lightning_compile", "runner_whole", "runner_chunked"]
    chunked, whole = race["runner_chunked"]["measured"], race["runner_whole"]["measured"]
    assert chunked["loss/chunked"] is True and chunked["loss/chunks"] == 4 and whole["loss/chunked"] is False
    assert all(f["measured"]["graph_breaks"] == 0 and f["measured"]["recompiles"] == 0 for f in race.values())
    assert all(0 < f["measured"]["step_peak_gib"] <= f["measured"]["peak_gib"] for f in race.values())
    assert race["runner_chunked"]["eval_loss"] == pytest.approx(race["runner_whole"]["eval_loss"], rel=1e-3)
    ladder = {r["contestant"]: r for r in result["ladder"]}
    assert list(ladder) == ["lightning_compile", "runner_chunked"]
    assert all(r["largest_batch"] == 4 and list(r["peaks_gib"]) == ["1", "2", "4"] for r in ladder.values()), ladder
    assert "| 4,096 | lora | 64 x 2 | runner_chunked |" in proc.stdout
    assert "4,096 ids, lora: runner_chunked" in proc.stdout


@pytest.mark.slow
def test_vocab_loss_quick_measures_each_variant_in_its_own_process() -> None:
    """``benchmarks/vocab_loss.py --quick``: the whole logits and torch's chunked op, each in a process of its own."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vocab_loss.py"), "--quick", "--variants", "whole",
                           "functional:64", "--steps", "2"], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert [r["variant"] for r in rows] == ["whole", "functional:64"] and all("error" not in r for r in rows), rows
    assert all(r["graph_breaks"] == 0 and r["step_ms"] > 0 for r in rows)
    assert "| 1,000 | functional:64 |" in proc.stdout


@pytest.mark.slow
def test_data_scale_quick_measures_first_steps_cold_and_warm(tmp_path: Path) -> None:
    """``benchmarks/data_scale.py --quick``: runner on two sizes of generated Alpaca rows, cold then warm (the warm
    run reads the store the cold one wrote), each size's time to first step and peak memory, and the ratio to the
    reference size."""
    out = tmp_path / "data_scale.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "data_scale.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    runs = result["results"]["runner, bytes"]
    assert list(runs) == [str(n) for n in result["sizes"]] and len(result["sizes"]) == 2
    for r in runs.values():
        assert 0 < r["cold"]["first_step_s"] < r["cold"]["total_s"] and r["cold"]["peak_rss_mib"] > 0
        assert r["warm_first_step_s"] > 0 and r["warm"][0]["examples"] == r["cold"]["examples"] > 0
    assert runs[str(result["sizes"][0])]["warm_vs_reference_x"] == 1.0
    assert "| runner, bytes | " in proc.stdout


@pytest.mark.slow
def test_data_scale_prepare_quick_times_chat_preference_and_alpaca_preparation(tmp_path: Path) -> None:
    """``benchmarks/data_scale.py --prepare --quick``: ShareGPT conversations, preference pairs and Alpaca rows, each
    prepared in a fresh process with the BPE tokenizer and Llama 3's chat template: rows, ids and their rates."""
    out = tmp_path / "data_prepare.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "data_scale.py"), "--prepare", "--quick", "--out",
                           str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert list(result["results"]) == ["chat", "preference", "alpaca"]
    for r in result["results"].values():
        assert r["rows"] == result["rows"] == 2_000 and r["ids"] > r["rows"] and r["rows_per_s"] > 0
        assert 0 < r["tokenizing_s"] <= r["prepare_s"] and r["ids_per_s"] > 0
    assert "| chat | " in proc.stdout and "| preference | " in proc.stdout
