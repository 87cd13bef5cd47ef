"""Bad input is refused up front: one message naming the key, the value and the fix; exit code 2;
nothing written (not even a run directory). The table runs ``precheck`` in-process (what
``python -m runner`` runs before Hydra), the whole entry point in this process where the message comes later
(``tests/cli.py``), and one real process checks the exit code and the empty cwd."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from runner.config import ConfigError
from runner.config.composing.precheck import precheck
from tests.cli import Outcome, run_cli
from tests.test_reliability_support import env

# (overrides on top of +recipe=smoke, fragments the message must contain: key, value, fix)
BAD_INPUTS: list[tuple[list[str], list[str]]] = [
    # step_backward cannot recompute the GPT's attention (a random op) in a checkpointed block
    (["compile=step_backward", "offload=checkpoint", "compile.backend=aot_eager"],
     ["compile.scope=step_backward", "compile.scope=step", "offload=checkpoint_budget"]),
    # Inductor's C++ wrapper cannot save and restore the random state a checkpointed attention needs
    (["compile.backend=inductor", "offload=checkpoint", "++compile.options.cpp_wrapper=true"],
     ["cpp_wrapper option (compile.options)", "offload=checkpoint_budget", "++compile.options.cpp_wrapper=false"]),
    # unknown keys (the misspelt ones: MISSPELT below)
    (["+trainer.foo=1"], ["trainer.foo=1", "no key foo", "its keys are accelerator, devices"]),
    (["compile.options.cpp_wraper=true"], ["compile.options.cpp_wraper", "`+compile.options.cpp_wraper=true` adds"]),
    (["+logger.csvv.save_dir=x"], ["logger.csvv has no _target_", "did you mean `logger.csv`?"]),
    # wrong types / unknown enum values
    (["trainer.max_steps=abc"], ["max_steps", "abc", "type"]),
    (["compile.scope=bogus"], ["bogus", "expected one of", "step_backward"]),
    (["compile.on_error=skip"], ["skip", "raise, eager"]),
    (["reliability.on_nonfinite=ignore"], ["ignore", "stop, skip"]),
    (["compile.fullgraph=maybe"], ["fullgraph", "maybe"]),
    # unknown group options
    (["compile=bogus"], ["compile=bogus", "no option bogus", "blocks eager model step step_backward"]),
    (["reliability=bogus"], ["reliability=bogus", "default skip_nonfinite"]),
    # out-of-range values
    (["trainer.max_steps=0"], ["trainer.max_steps=0", "positive"]),
    (["trainer.val_check_interval=0"], ["trainer.val_check_interval=0", "> 0"]),
    (["data.batch_size=0"], ["data.batch_size=0", "> 0"]),
    (["optimizer.lr=-0.1"], ["optimizer.lr=-0.1", "> 0"]),
    (["data.val_fraction=1.5"], ["data.val_fraction=1.5", "[0, 1)"]),
    (["model.dropout=1.0"], ["model.dropout=1.0", "[0, 1)"]),
    (["trainer.limit_val_batches=-1"], ["trainer.limit_val_batches=-1", ">= 0"]),
    (["reliability.max_skipped_steps=-1"], ["reliability.max_skipped_steps=-1", ">= 0"]),
    (["offload.memory_budget=2"], ["offload.memory_budget=2.0", "(0, 1)"]),
    (["trainer.accumulate_grad_batches=0"], ["trainer.accumulate_grad_batches=0", "at least 1"]),
    (["dynamic.min=10", "dynamic.max=5"], ["dynamic.min=10", "dynamic.max=5", "min < max"]),
    (["trainer.max_time=90min"], ["trainer.max_time=90min", "DD:HH:MM:SS"]),
    # names torch or the machine does not know
    (["compile.backend=inductr"], ["compile.backend=inductr", "inductor, aot_eager, eager"]),
    (["compile.mode=fastest"], ["compile.mode=fastest", "max-autotune"]),
    (["trainer.precision=fp8"], ["trainer.precision=fp8", "32-true or bf16-mixed"]),
    (["trainer.accelerator=cuda"], ["trainer.accelerator=cuda", "no CUDA device", "trainer=cpu"]),
    (["data.path=/nonexistent/corpus"], ["data.path=/nonexistent/corpus", "does not exist"]),
    (["ckpt_path=/nonexistent/x.ckpt"], ["ckpt_path=/nonexistent/x.ckpt", "ckpt_path=last"]),
    (["reliability.load_cache_artifacts=/nonexistent"], ["reliability.load_cache_artifacts=/nonexistent",
                                                          "compile_cache/artifacts.bin"]),
    # impossible combinations across groups
    (["compile.fullgraph=true", "compile.on_error=eager"], ["compile.fullgraph=true", "compile.on_error=eager",
                                                             "compile.fullgraph=false"]),
    (["compile=eager", "compile.fullgraph=true"], ["compile.scope=none", "fullgraph", "compile=step"]),
    (["cudagraphs.mode=reduce_overhead", "dynamic.policy=unbacked"], ["unbacked", "cudagraphs=disabled"]),
    (["data.length_grouping=8"], ["data.length_grouping=8", "packed", "data=text_documents"]),
    (["compile.mode=reduce-overhead"], ["compile.mode=reduce-overhead", "cudagraphs.mode=reduce_overhead"]),
    (["compile.mode=default", "+compile.options={a:1}"], ["compile.mode=default", "compile.options"]),
    (["compile=step_backward", "trainer.devices=2"], ["step_backward", "compile.scope=step"]),
    (["data.seq_len=64", "model.block_size=32"], ["data.seq_len=64", "model.block_size=32"]),
    (["dynamic.policy=bucket"], ["dynamic.policy=bucket", "dynamic.buckets=[64,128,256,512]"]),
    # CUDA graphs with what cannot work beside them (refused on any machine: the config says it all)
    (["cudagraphs=reduce_overhead", "compile.backend=inductor", "trainer.accumulate_grad_batches=2"],
     ["trainer.accumulate_grad_batches=2", "overwritten", "169545", "cudagraphs=disabled"]),
    (["cudagraphs=reduce_overhead"], ["compile.backend=eager", "compile.backend=inductor"]),
    (["cudagraphs=reduce_overhead", "compile.backend=inductor", "offload=cpu"], ["offload=cpu", "offload=bf16"]),
    (["cudagraphs=reduce_overhead", "compile=eager"], ["compile.scope=none", "compile=step"]),
    (["cudagraphs=reduce_overhead", "compile.backend=inductor", "compile.mode=max-autotune-no-cudagraphs"],
     ["compile.mode=max-autotune-no-cudagraphs", "Leave compile.mode unset"]),
    (["trainer.accelerator=mps"], ["trainer.accelerator=mps", "no MPS device", "trainer=cpu"]),
    # a model with nothing to train: the optimizer would refuse its empty parameter list once the run started
    (["model=custom", "model._target_=torch.nn.Identity"], ["model._target_=torch.nn.Identity", "no parameters",
                                                            "model=gpt"]),
]


# A misspelt key or option, with and without +, at several depths -> the one suggestion it gets.
MISSPELT: list[tuple[str, str]] = [
    ("trainer.max_step=5", "trainer.max_steps=5"),
    ("+trainer.max_step=5", "trainer.max_steps=5"),  # + used to add the typo silently, and train 8 steps
    ("++trainer.max_step=5", "trainer.max_steps=5"),
    ("compile.scop=step", "compile.scope=step"),
    ("+compile.scop=step", "compile.scope=step"),
    ("optimizer.lrr=1", "optimizer.lr=1"),
    ("+optimizer.lrr=1", "optimizer.lr=1"),
    ("model.n_layr=3", "model.n_layer=3"),
    ("+model.n_layr=3", "model.n_layer=3"),
    ("+trainer.fsdp.consolidat=false", "trainer.fsdp.consolidate=false"),
    ("+logger.csv.nam=x", "logger.csv.name=x"),
    ("+sed=1", "seed=1"),
    ("compile=stepp", "compile=step"),
    ("offload=bf61", "offload=bf16"),
    ("model=gptt", "model=gpt"),
    ("+recipe=smok", "+recipe=smoke"),
    ("logger.csvv.save_dir=x", "logger.csv.save_dir=x"),  # an open node: its own keys are the names
]


@pytest.mark.parametrize(("override", "suggestion"), MISSPELT, ids=[o for o, _ in MISSPELT])
def test_misspelt_key_or_option_is_refused_with_the_close_name(override: str, suggestion: str) -> None:
    """The refusal names the close schema field (or option file) as an override that runs as given,
    and never suggests ``+`` for a key the typed node has no field for."""
    base = [] if override.startswith("+recipe=") else ["+recipe=smoke"]
    with pytest.raises(ConfigError) as info:
        precheck([*base, override])
    message = str(info.value)
    assert "\n" not in message.strip(), "one paragraph"
    assert f"did you mean `{suggestion}`?" in message, message
    assert "To append" not in message and "`+key" not in message
    if not suggestion.startswith("+"):
        assert "`+" not in message, message
    precheck([*base, suggestion])  # the suggestion composes, converts and validates


def test_a_misspelt_key_in_a_project_file_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "gpt.yaml").write_text("defaults: [gpt_schema, _self_]\nn_layers: 1\n")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "typo.yaml").write_text("# @package _global_\n# A typo.\ntrainer: {max_step: 5}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"option model=gpt \(conf/model/gpt.yaml\) sets model.n_layers, .*"
                                          r"did you mean `model.n_layer`\?"):
        precheck([])
    (tmp_path / "conf" / "model" / "gpt.yaml").unlink()
    with pytest.raises(ConfigError, match=r"recipe typo \(recipes/typo.yaml\) sets trainer.max_step, .*"
                                          r"did you mean `trainer.max_steps`\?"):
        precheck(["+recipe=typo"])


def test_a_key_added_with_plus_under_an_open_node_still_composes() -> None:
    precheck(["+recipe=smoke", "compile.backend=inductor", "++compile.options.max_autotune=false"])
    precheck(["+recipe=smoke", "model=custom", "model._target_=torch.nn.Linear", "+model.in_features=4",
              "+model.out_features=4", "telemetry.speedup_steps=0"])


def test_table_has_at_least_20_bad_inputs() -> None:
    assert len(BAD_INPUTS) >= 20


@pytest.mark.parametrize(("overrides", "fragments"), BAD_INPUTS, ids=lambda v: " ".join(v) if isinstance(v[0], str)
                         and "=" in v[0] else None)
def test_bad_input_is_named_with_its_fix(overrides: list[str], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        precheck(["+recipe=smoke", *overrides])
    message = str(info.value)
    assert "\n" not in message.strip(), "one paragraph"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"


def test_fp8_offload_on_a_torch_without_float8(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch, "float8_e4m3fn")
    with pytest.raises(ConfigError, match=r"offload=fp8 needs torch.float8_e4m3fn.*offload=bf16"):
        precheck(["+recipe=smoke", "offload.strategy=fp8"])


def test_cuda_graphs_on_cpu_is_a_warning_not_an_error_said_once(caplog: pytest.LogCaptureFixture,
                                                                tmp_path: Path) -> None:
    from runner.config import compose, load

    overrides = ["+recipe=smoke", "cudagraphs.mode=reduce_overhead", "compile.backend=inductor", "seed=4321"]
    with caplog.at_level(logging.WARNING):
        precheck(overrides)  # validates without a word: the job says it
        load(compose(overrides, run_dir=str(tmp_path)))
    assert caplog.text.count("cudagraphs.mode=reduce_overhead on trainer.accelerator=cpu") == 1
    assert "cudagraphs=disabled" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [["+trainer.max_step=5"], ["compile.fullgraph=true", "compile.on_error=eager"]])
def test_cli_refuses_bad_input_and_writes_nothing(overrides: list[str], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "runner", "+recipe=smoke", *overrides], cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("runner: "), proc.stderr
    assert overrides[0].split("=")[0].split(".")[-1] in lines[0]
    if overrides[0].startswith("+"):
        assert "did you mean `trainer.max_steps=5`?" in lines[0], lines[0]
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == [], "nothing may be written (no outputs/ run dir)"


def _refused(proc: subprocess.CompletedProcess[str] | Outcome, run_dir: Path) -> str:
    """The one line ``python -m runner`` refused with (exit 2, no traceback, no run directory)."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("runner: "), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not run_dir.exists(), "nothing may be written (no run dir)"
    return lines[0]


@pytest.mark.slow
def test_a_model_without_parameters_is_refused_before_the_run_dir(tmp_path: Path) -> None:
    """torch.nn.Identity has no parameter: the optimizer over it would fail inside the run (exit 1,
    a Hydra traceback, a run directory left behind); refused up front instead."""
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "runner", "+recipe=smoke", "model=custom",
                           "model._target_=torch.nn.Identity", f"hydra.run.dir={run_dir}"], cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=120)
    line = _refused(proc, run_dir)
    assert "model._target_=torch.nn.Identity has nothing to train (it has no parameters)" in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["brokenpkg.Model", "uses_broken.Net"])
def test_a_broken_installed_package_is_named_not_the_dotted_path(target: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A package that is installed but raises while being imported (a torchvision built for another torch:
    ``RuntimeError: operator torchvision::nms does not exist``), imported by the target's own module or
    named by it: the message names that package and its error, not the user's dotted path."""
    packages = tmp_path / "site"
    (packages / "brokenpkg").mkdir(parents=True)
    (packages / "brokenpkg" / "__init__.py").write_text(
        'raise RuntimeError("operator brokenpkg::nms does not exist")\n')
    (packages / "uses_broken.py").write_text("import torch\nimport brokenpkg  # noqa: F401\n\n\n"
                                             "class Net(torch.nn.Linear):\n    pass\n")
    monkeypatch.syspath_prepend(str(packages))  # installed: importable from anywhere
    run_dir = tmp_path / "run"
    proc = run_cli("+recipe=smoke", "model=custom", f"model._target_={target}", f"hydra.run.dir={run_dir}",
                   cwd=tmp_path)
    line = _refused(proc, run_dir)
    assert f"model._target_={target} cannot be imported: importing the package brokenpkg failed" in line, line
    assert "RuntimeError: operator brokenpkg::nms does not exist" in line, line
    assert "Check the dotted path" not in line and "The dotted path is not the problem" in line, line
    if target.startswith("uses_broken"):
        assert "while importing uses_broken" in line and "reinstall a brokenpkg that matches this torch" in line, line
