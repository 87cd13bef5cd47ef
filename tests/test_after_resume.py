"""Resuming from the run's own config: ``runner resume RUN_DIR [overrides]`` (and ``hydra.run.dir=RUN_DIR
ckpt_path=last`` alone) is the saved command line plus the new overrides; an override that changes what the
checkpoint's state fits is refused in one paragraph; a new ``trainer.max_steps`` keeps or stretches the
learning-rate schedule as ``scheduler.on_resume`` says, with a warning and a note in the summary."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from runner.after.resume import resume_command
from runner.config import ConfigError, compose
from runner.config.composing.precheck import precheck
from runner.training.schedules import warmup_cosine
from tests import after_runs
from tests.cli import run_cli

ROOT = Path(__file__).resolve().parents[1]


# -- the schedule at resume ---------------------------------------------------------------------------------------
Schedule = tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]


def _schedule(total: int, on_resume: str = "keep") -> Schedule:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    return opt, warmup_cosine(opt, warmup_steps=2, total_steps=total, min_lr_ratio=0.1, on_resume=on_resume)


def _rates(opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LRScheduler, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def _resumed(at: int, total: int, on_resume: str) -> Schedule:
    """A 20-step schedule stopped after ``at`` steps, its state saved and loaded as Lightning does at resume (through a
    checkpoint torch loads with weights_only: the plan is plain values), into one configured for ``total``."""
    opt, sched = _schedule(20)
    _rates(opt, sched, at)
    saved = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}
    torch.save(saved, buffer := io.BytesIO())
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    opt2, sched2 = _schedule(total, on_resume)
    opt2.load_state_dict(loaded["optimizer"])
    sched2.load_state_dict(loaded["scheduler"])
    return opt2, sched2


def test_keep_follows_the_runs_plan_and_holds_its_final_rate_past_it(caplog: pytest.LogCaptureFixture) -> None:
    whole = _rates(*_schedule(20), 21)
    with caplog.at_level(logging.WARNING):
        opt, sched = _resumed(12, 30, "keep")
    rates = _rates(opt, sched, 18)
    assert rates[:9] == pytest.approx(whole[12:21])  # steps 12-20 as if never stopped
    assert rates[8:] == pytest.approx([0.1] * 10)  # then the plan's floor, never a jump up
    assert "scheduler.on_resume=keep (the default)" in caplog.text and "trainer.max_steps=30" in caplog.text
    assert sched.figures()["run/lr_schedule"] == "keep: planned for 20 steps, trainer.max_steps=30"


def test_stretch_continues_from_the_resume_step_and_ends_at_the_new_max_steps(caplog: pytest.LogCaptureFixture) -> None:
    whole = _rates(*_schedule(20), 21)
    with caplog.at_level(logging.WARNING):
        opt, sched = _resumed(12, 30, "stretch")
    rates = _rates(opt, sched, 19)
    assert rates[0] == pytest.approx(whole[12])  # no jump at the resume step
    assert rates[9] == pytest.approx(whole[16])  # step 21 is the stretched plan's step 16: 12 + 9 * 8/18
    assert rates[-1] == pytest.approx(0.1) and rates[-2] > 0.1  # the floor at step 30, not before
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))
    assert "stretched from step 12 to end at step 30" in caplog.text
    assert sched.figures()["run/lr_schedule"].startswith("stretch: from step 12, to end at 30")


def test_stretching_a_finished_plan_says_nothing_is_left_to_stretch(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        opt, sched = _resumed(20, 30, "stretch")
    assert _rates(opt, sched, 10) == pytest.approx([0.1] * 10)
    assert "nothing is left to stretch" in caplog.text and "nothing left" in sched.figures()["run/lr_schedule"]


def test_the_same_max_steps_resumes_silently(caplog: pytest.LogCaptureFixture) -> None:
    whole = _rates(*_schedule(20), 20)
    with caplog.at_level(logging.WARNING):
        opt, sched = _resumed(7, 20, "keep")
    assert _rates(opt, sched, 13) == pytest.approx(whole[7:]) and not caplog.text and sched.figures() == {}


# -- the command line a resume runs -------------------------------------------------------------------------------
@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run directory as Hydra leaves it (``.hydra/overrides.yaml`` and ``config.yaml``), of ``+recipe=smoke``."""
    d = tmp_path / "run"
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text("- +recipe=smoke\n- compile.backend=eager\n- ckpt_path=last\n")
    (d / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(compose(["+recipe=smoke", "compile.backend=eager"],
                                                                        run_dir=str(d))))
    return d


def test_resume_is_the_saved_command_line_with_the_new_overrides(run_dir: Path) -> None:
    argv = resume_command(["resume", str(run_dir), "trainer.max_steps=30", "compile.backend=aot_eager"])
    assert argv == ["+recipe=smoke", "trainer.max_steps=30", "compile.backend=aot_eager", "ckpt_path=last",
                    f"hydra.run.dir={run_dir}"]
    precheck(argv)  # what python -m runner then runs composes and validates
    alone = resume_command([f"hydra.run.dir={run_dir}", "ckpt_path=last"])
    assert alone == ["+recipe=smoke", "compile.backend=eager", "ckpt_path=last", f"hydra.run.dir={run_dir}"]
    free = ["data.num_workers=1", "model.dropout=0.1", "scheduler.on_resume=stretch", "compile=eager"]
    assert resume_command(["resume", str(run_dir), *free]) is not None  # none changes what the checkpoint fits


@pytest.mark.parametrize(("override", "fragments"), [
    ("model.n_layer=3", ["model.n_layer=3 (the run trained with 2)", "the model's shape"]),
    ("data.seq_len=64", ["data.seq_len=64 (the run trained with 32)", "changes the data", "model.block_size=64"]),
    ("optimizer.lr=0.1", ["optimizer.lr=0.1 (the run trained with 0.003)", "comes back from the checkpoint"]),
    ("optimizer=sgd", ["optimizer._target_=torch.optim.SGD", "would be ignored or the state would not fit"]),
    ("scheduler.warmup_steps=5", ["scheduler.warmup_steps=5 (the run trained with 20)", "scheduler.on_resume"]),
])
def test_an_override_that_changes_what_the_checkpoint_fits_is_refused(run_dir: Path, override: str,
                                                                      fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        resume_command(["resume", str(run_dir), override])
    message = str(e.value)
    assert "\n" not in message and f"cannot resume {run_dir} with " in message
    assert "python -m runner resume" in message and "start a new run" in message
    for fragment in fragments:
        assert fragment in message
    assert sorted(p.name for p in run_dir.rglob("*")) == [".hydra", "config.yaml", "overrides.yaml"]


def test_resuming_with_overrides_typed_again_is_checked_against_the_runs_config(run_dir: Path) -> None:
    kept = [f"hydra.run.dir={run_dir}", "ckpt_path=last"]
    assert resume_command(["+recipe=smoke", "compile.backend=eager", "trainer.max_steps=12", *kept]) is None
    with pytest.raises(ConfigError,
                       match=r"model.n_layer=4 \(the run trained with 2\).*The overrides differ from its saved"):
        resume_command(["compile.backend=eager", *kept])  # +recipe=smoke forgotten: the default model
    (run_dir / ".hydra" / "config.yaml").write_text(
        (run_dir / ".hydra" / "config.yaml").read_text().replace("n_layer: 2", "n_layer: 3"))
    with pytest.raises(ConfigError, match=r"model.n_layer=2 \(the run trained with 3\).*config files"):
        resume_command(["resume", str(run_dir)])  # the recipe changed under the run


@pytest.mark.parametrize(("base", "override", "follows"), [
    (["+recipe=smoke", "compile.backend=eager"], "data.seq_len=64", "model.block_size=64 (the run trained with 32)"),
    (["model=hf_causal_lm", "compile=eager"], "model.path=SAVED", "data.tokenizer=SAVED (the run trained with null)"),
])
def test_a_setting_that_follows_an_override_is_not_blamed_on_the_config_files(
        tmp_path: Path, base: list[str], override: str, follows: str) -> None:
    """data.seq_len sets model.block_size, model.path sets data.tokenizer: the refusal names both as the override's
    doing (no config file changed), in whole sentences."""
    from tests.hf_models import saved_llama

    saved = str(saved_llama())
    d = tmp_path / "run"
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(base)))
    (d / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(compose(base, run_dir=str(d))))
    with pytest.raises(ConfigError) as e:
        resume_command(["resume", str(d), override.replace("SAVED", saved)])
    message = str(e.value)
    assert follows.replace("SAVED", saved) in message and "config files" not in message
    assert "; A resume" not in message and message.endswith("To train with the new setting, start a new run.")


def _corpus(path: Path, seed: int, words: int = 8000) -> Path:
    import random

    rng = random.Random(seed)
    path.write_text(" ".join("".join(rng.choices("abcdefgh", k=rng.randint(2, 7))) for _ in range(words)) + "\n")
    return path


def test_a_resume_on_changed_data_is_refused_unless_allowed_and_then_the_summary_says_so(tmp_path: Path) -> None:
    """The run records what it read (data_fingerprint.json); its file replaced, a resume is refused naming it, with
    nothing written; --allow-changed-data (after.allow_changed_data=true) trains on it, the summary says what
    changed, and the next resume neither carries the flag nor refuses the data it now trained on."""
    from runner.config import load
    from runner.data.fingerprint import FILE
    from runner.run import run
    from runner.telemetry.report import format_summary

    corpus = _corpus(tmp_path / "corpus.txt", seed=0)
    trained = after_runs.train(tmp_path / "run", [*after_runs.GPT, f"data.path={corpus}"])
    run_dir = trained.run_dir
    assert (run_dir / FILE).is_file()
    assert resume_command(["resume", str(run_dir), "trainer.max_steps=5"]) is not None  # the same data: resumes
    _corpus(corpus, seed=1, words=6000)
    before = sorted(p.name for p in run_dir.rglob("*"))
    with pytest.raises(ConfigError) as e:
        resume_command(["resume", str(run_dir), "trainer.max_steps=5"])
    message = str(e.value)
    assert "\n" not in message and "its data changed since the run read it" in message
    assert f"data.path={corpus}: corpus.txt changed (" in message and " bytes, modified " in message
    assert f"python -m runner resume {run_dir} --allow-changed-data" in message
    assert sorted(p.name for p in run_dir.rglob("*")) == before
    with pytest.raises(ConfigError, match="its data changed"):  # the old way of resuming gets the same check
        resume_command(["+recipe=smoke", *after_runs.GPT[1:], f"data.path={corpus}", "trainer.max_steps=5",
                        f"hydra.run.dir={run_dir}", "ckpt_path=last"])
    alone = resume_command([f"hydra.run.dir={run_dir}", "ckpt_path=last", "after.allow_changed_data=true"])
    assert alone is not None and "after.allow_changed_data=true" in alone
    argv = resume_command(["resume", str(run_dir), "--allow-changed-data", "trainer.max_steps=5"])
    assert argv is not None and "after.allow_changed_data=true" in argv
    overrides = [o for o in argv if not o.startswith("hydra.")]
    result = run(load(compose(overrides, run_dir=str(run_dir))))
    assert result.figures["run/steps"] == 5
    assert "corpus.txt changed (" in result.figures["data/changed"]
    assert "changed since the checkpoint" in format_summary(result.figures)
    (run_dir / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(overrides)))  # as Hydra
    again = resume_command(["resume", str(run_dir), "trainer.max_steps=6"])
    assert again is not None and not any("allow_changed_data" in o for o in again)


def test_what_is_no_run_of_runners_is_left_alone_or_refused(tmp_path: Path) -> None:
    assert resume_command([f"hydra.run.dir={tmp_path}", "ckpt_path=last"]) is None  # Lightning's own resume
    assert resume_command(["+recipe=smoke"]) is None
    with pytest.raises(ConfigError, match="does not exist"):
        resume_command(["resume", str(tmp_path / "missing")])
    with pytest.raises(ConfigError, match="needs the run directory first"):
        resume_command(["resume", "trainer.max_steps=3"])


def test_a_misspelt_flag_of_resume_is_refused_with_the_real_one(run_dir: Path, tmp_path: Path) -> None:
    """Hydra printed its usage and "unrecognized arguments" for a flag of resume's own spelt wrong: one paragraph
    now, naming it."""
    out = run_cli("resume", str(run_dir), "--allow-changed-dat", cwd=tmp_path)
    err = out.stderr.strip()
    assert out.returncode == 2 and "\n" not in err, err
    assert err.startswith("runner: --allow-changed-dat is not a flag of runner resume: did you mean "
                          "--allow-changed-data?"), err
    assert sorted(p.name for p in run_dir.rglob("*")) == [".hydra", "config.yaml", "overrides.yaml"]


@pytest.mark.slow
def test_resume_from_the_command_line_trains_on_with_the_runs_own_config(tmp_path: Path) -> None:
    """A 3-step run, resumed by ``runner resume RUN_DIR trainer.max_steps=5`` alone: it reaches step 5 with the run's
    model and data, keeps its schedule's plan with a warning, and says so in its report (a real process: Hydra's entry
    point reads the rewritten command line)."""
    trained = after_runs.train(tmp_path / "run", after_runs.GPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline"}
    proc = subprocess.run([sys.executable, "-m", "runner", "resume", str(trained.run_dir), "trainer.max_steps=5"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((trained.run_dir / "report.json").read_text())
    assert report["run/steps"] == 5
    assert report["run/lr_schedule"] == "keep: planned for 3 steps, trainer.max_steps=5"
    assert "scheduler.on_resume=keep (the default)" in proc.stdout + proc.stderr
    saved = OmegaConf.to_container(OmegaConf.load(trained.run_dir / ".hydra" / "overrides.yaml"))
    kept = [o for o in after_runs.GPT if o != "trainer.max_steps=3"]
    assert saved == [*kept, "trainer.max_steps=5", "ckpt_path=last"]  # the next resume reads them


@pytest.mark.slow
def test_a_resumed_runs_report_describes_the_whole_run(tmp_path: Path) -> None:
    """An 8-step run (validating at step 8), resumed to step 10 and then, under compile=eager, to 12: neither resumed
    part holds a multiple of trainer.val_check_interval, yet each report has the validation of the model it ends
    with; it says where the run resumed, counts the compile time of every part, and the eager part shows no compiled
    step (the speedup measured before is no figure of a run that compiles nothing since)."""
    first = after_runs.train(tmp_path / "run", [*after_runs.GPT, "trainer.max_steps=8", "trainer.val_check_interval=8",
                                                "telemetry.speedup_steps=1"])
    assert first.figures["perf/speedup_status"] == "measured" and first.figures["compile/time_s"] > 0
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline"}

    def resume(*overrides: str) -> tuple[dict[str, Any], str]:
        proc = subprocess.run([sys.executable, "-m", "runner", "resume", str(first.run_dir), *overrides],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads((first.run_dir / "report.json").read_text()), proc.stdout

    report, _ = resume("trainer.max_steps=10")
    assert report["run/steps"] == 10 and report["run/resumed_at_step"] == 8
    assert isinstance(report.get("val/loss"), float), sorted(report)  # validated at step 10
    before = report["compile/time_before_resume_s"]
    assert 0 < before <= first.figures["compile/time_s"] and report["compile/time_s"] > before
    assert report["perf/speedup_status"] == "measured before the resume"  # this part's pair did not finish

    eager, out = resume("trainer.max_steps=12", "compile=eager")
    assert eager["run/steps"] == 12 and eager["run/resumed_at_step"] == 10 and isinstance(eager.get("val/loss"), float)
    assert eager["compile/time_s"] == pytest.approx(report["compile/time_s"], rel=1e-6)  # none since: both parts'
    assert eager["compile/time_before_resume_s"] == pytest.approx(report["compile/time_s"], rel=1e-6)
    assert eager["perf/speedup_status"] == "nothing compiled"
    assert "perf/speedup_x" not in eager and "perf/compiled_step_ms" not in eager
    assert "compiled step" not in out and "nothing was compiled since the resume at step 10" in out, out[-3000:]
    assert re.search(r"│ resumed at step +│ +10 │", out), out[-3000:]
