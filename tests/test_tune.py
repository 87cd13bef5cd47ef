"""``runner tune``: a CI-sized tune of the smoke recipe end to end (real Optuna, real runs, SQLite study),
the recipe it writes, the loss-parity verdict and the tune's own config checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config import ConfigError, compose, load
from runner.config.tune import load_tune
from runner.tune.output import TrialResult
from runner.tune.space import BF16_UNITS, cpu_flags, current_values, param_overrides, resolve_space
from runner.tune.study import judge

optuna = pytest.importorskip("optuna")  # a dev dependency: the GPU machines collect these tests without it

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_ci_sized_tune_of_the_smoke_recipe(tmp_path: Path) -> None:
    """3 trials (the default stack first), Dynamo's eager backend, 12 steps each: every trial is
    measured or pruned, the winner is written as a recipe that composes to the winning stack."""
    tune_dir, project = tmp_path / "tune", tmp_path / "project"
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "tune", "+recipe=smoke", "tune.trials=3", "tune.steps=12",
         "tune.prune_after_steps=8", "tune.val_batches=2", f"tune.dir={tune_dir}",
         f"tune.recipe_dir={project / 'recipes'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "WANDB_MODE": "offline"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tune_dir / "tune.json").read_text())
    trials = summary["trials"]
    assert trials[0]["name"] == "eager" and trials[0]["params"]["scope"] == "none"
    assert trials[1]["name"] == "default" and trials[1]["params"]["scope"] == "step"  # the smoke recipe's stack
    assert len(trials) == 4 and {t["state"] for t in trials[1:]} <= {"complete", "pruned", "rejected"}
    for t in trials:
        if t["state"] in ("complete", "baseline"):
            assert t["us_per_token"] > 0 and t["val_bpb"] > 0
        if t["state"] == "pruned":  # stopped before its validation: no loss figure of its own
            assert t["val_bpb"] is None
        if t["state"] == "complete":  # within the tolerance of eager's loss
            assert t["val_bpb"] <= trials[0]["val_bpb"] + summary["loss_tolerance_bpb"]
    winner = summary["winner"]
    assert winner["state"] == "complete"
    assert winner["us_per_token"] == min(t["us_per_token"] for t in trials[1:] if t["state"] == "complete")
    assert summary["speedup_vs_eager_x"] == pytest.approx(trials[0]["us_per_token"] / winner["us_per_token"])
    assert summary["speedup_vs_default_x"] >= 1.0
    # bf16 is searched only where the CPU has bfloat16 matrix units (else it is emulated, ~100x slower).
    bf16 = {"precision"} if BF16_UNITS & cpu_flags() else set()
    assert set(summary["searched"]) == {"scope", "optimizer", "offload"} | bf16
    assert {"shapes", "cpp_wrapper", "cudagraphs"} <= set(summary["not_searched"])  # packed text, eager backend
    # The study is in SQLite, for optuna-dashboard; one Optuna trial per trial above.
    study = optuna.load_study(study_name=tune_dir.name, storage=f"sqlite:///{tune_dir / 'study.db'}")
    assert len(study.trials) == 3
    # The loss-parity constraint is on every measured trial, where TPE reads it (Trial.set_constraint).
    for t in study.trials:
        if t.user_attrs["state"] in ("complete", "rejected"):
            assert t.constraints["val_bpb_excess"] == pytest.approx(t.user_attrs["bpb_excess"])
    assert "constraints_func" not in proc.stderr  # Optuna 5 deprecated it (FutureWarning)
    # The sweep summary, ranked by time per token, and tune.md with the importances.
    ranked = json.loads((tune_dir / "summary.json").read_text())
    assert list(ranked["rankings"])[0] == "time_per_token" and len(ranked["runs"]) >= 4
    assert (tune_dir / "summary.png").is_file()
    markdown = (tune_dir / "tune.md").read_text()
    assert "**Winner**" in markdown and "Importance of each choice" in markdown
    assert set(summary["importances"]) <= set(summary["searched"])  # Optuna's fANOVA, when 2+ trials completed
    # The recipe: the smoke recipe with the winning stack on top, found like any project recipe.
    recipe = Path(summary["recipe_file"])
    assert recipe == project / "recipes" / "smoke_tuned.yaml"
    cfg = load(compose(["+recipe=smoke_tuned"], run_dir=str(tmp_path / "run"), config_dirs=[project]))
    assert cfg.recipe == "smoke_tuned" and cfg.trainer.max_steps == 8  # smoke's own length
    p = winner["params"]
    chosen = (cfg.compile.scope.value, cfg.compile.optimizer.value, cfg.trainer.precision, cfg.offload.strategy.value)
    assert chosen == (p["scope"], p["optimizer"], p.get("precision", "32-true"), p["offload"])


def test_loss_parity_rejects_a_trial_beyond_the_tolerance(tmp_path: Path) -> None:
    def result(bpb: float) -> TrialResult:
        return TrialResult(run_dir=tmp_path, us_per_token=10.0, val_bpb=bpb)

    assert judge(result(3.70), eager_bpb=3.66, tolerance=0.05)[0] == "complete"
    state, reason, excess = judge(result(3.75), eager_bpb=3.66, tolerance=0.05)
    assert state == "rejected" and "+0.0900" in reason and excess == pytest.approx(0.04)
    assert judge(TrialResult(run_dir=tmp_path, pruned_at=9), 3.66, 0.05)[0] == "pruned"
    assert judge(TrialResult(run_dir=tmp_path, error="compile: x. fix"), 3.66, 0.05)[:2] == ("invalid", "compile: x")
    crashed = TrialResult(run_dir=tmp_path, error="the run failed: CompileFailure: y", failed=True)
    assert judge(crashed, 3.66, 0.05)[:2] == ("failed", "the run failed: CompileFailure: y")


def test_space_keeps_what_applies_to_the_model_and_device(tmp_path: Path) -> None:
    tune = load_tune(["space.offload=[none,cpu,bf16]"])
    quickstart = load(compose(["+recipe=quickstart"], run_dir=str(tmp_path)))
    text = resolve_space(tune.space, quickstart, flags=frozenset({"avx2", "amx_bf16"}))
    assert text.choices["precision"] == ["32-true", "bf16-mixed"]  # a CPU with bf16 matrix units
    emulated = resolve_space(tune.space, quickstart, flags=frozenset({"avx2"}))
    assert emulated.choices.get("precision", ["32-true"]) == ["32-true"] and "emulated" in emulated.dropped[
        "precision_bf16"]
    assert text.choices["cpp_wrapper"] == [False, True]  # Inductor on the CPU
    assert text.choices["offload"] == ["none", "bf16"]  # cpu offload is CUDA-only
    assert text.choices["optimizer"][0] == "auto"  # the recipe's own value, so the default stack is a point
    assert "shapes" in text.dropped and "cudagraphs" in text.dropped
    docs = resolve_space(tune.space, load(compose(["+recipe=dynamic_documents"], run_dir=str(tmp_path))))
    assert {"dynamic", "static", "automatic"} <= set(docs.choices["shapes"])  # per-document batches vary
    # Every choice's override composes into the value it names.
    params = {"scope": "blocks", "optimizer": "fused", "precision": "bf16-mixed", "shapes": "static",
              "offload": "bf16", "cpp_wrapper": True, "cudagraphs": "disabled"}
    cfg = load(compose(["+recipe=quickstart", *param_overrides(params)], run_dir=str(tmp_path)))
    assert current_values(cfg) == params


@pytest.mark.parametrize(("override", "named"), [
    ("steps=2", "tune.steps"), ("space.precision=[fp64]", "tune.space.precision"), ("trails=3", "trails"),
    ("prune_after_steps=40", "tune.prune_after_steps"), ("space.scope=[everything]", "scope"),
])
def test_bad_tune_config_is_refused_naming_the_key(override: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("[", r"\[")):
        load_tune([override])


def test_a_refused_tune_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from runner.tune import main

    monkeypatch.chdir(tmp_path)
    assert main(["+recipe=smoke", "tune.steps=2", f"tune.dir={tmp_path / 'tune'}"]) == 2
    assert "tune.steps=2" in capsys.readouterr().err
    assert main(["+recipe=smoke", "compile=stepp"]) == 2
    assert "compile" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def _write_tuned(project: Path, run_overrides: list[str], params: dict[str, object]) -> str:
    """The recipe the tune writes for a winner with ``params``, read back as text."""
    from runner.tune.output import TrialRow, write_recipe

    base = load(compose(run_overrides, run_dir=str(project / "base")))
    winner = TrialRow(3, "trial", params, str(project / "t3"), "complete", "", 10.0, 3.6, 1.0)
    summary = {"speedup_vs_default_x": 1.1, "speedup_vs_eager_x": 1.2, "device": "cpu", "study": "sqlite://",
               "eager": {"val_bpb": 3.6}}
    return write_recipe(winner, base, run_overrides, load_tune([f"recipe_dir={project / 'recipes'}"]),
                        summary).read_text()


def test_tuned_recipe_selects_groups_so_the_command_line_still_picks_them(tmp_path: Path) -> None:
    """The winning scope and offload are the recipe's group selections: ``compile=model`` on the command
    line replaces the tuned scope (a ``compile.scope`` field in the body would win over it)."""
    project = tmp_path / "project"
    params = {"scope": "blocks", "optimizer": "fused", "offload": "checkpoint"}
    text = _write_tuned(project, ["+recipe=smoke", "data.batch_size=2"], params)
    assert "override /compile: blocks" in text and "override /offload: checkpoint" in text and "scope" not in text

    def composed(*overrides: str) -> tuple[str, str, str, int]:
        cfg = load(compose(["+recipe=smoke_tuned", *overrides], run_dir=str(tmp_path / "run"),
                           config_dirs=[project]))
        return cfg.compile.scope.value, cfg.compile.optimizer.value, cfg.offload.strategy.value, cfg.data.batch_size

    assert composed() == ("blocks", "fused", "checkpoint", 2)  # the winning trial's stack, the run's batch
    assert composed("compile=model", "offload=none") == ("model", "fused", "none", 2)
    # A selection that would change more than the choice is written as a field: the run's budget stays.
    text = _write_tuned(project, ["+recipe=smoke", "offload=checkpoint_budget"], params)
    assert "override /offload: checkpoint_budget" in text and "strategy: checkpoint" in text
    cfg = load(compose(["+recipe=smoke_tuned"], run_dir=str(tmp_path / "run"), config_dirs=[project]))
    assert (cfg.compile.scope.value, cfg.offload.strategy.value, cfg.offload.memory_budget) == (
        "blocks", "checkpoint", 0.5)
