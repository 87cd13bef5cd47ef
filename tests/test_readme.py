"""The README's own-Trainer example runs exactly as written, as a script (real Inductor compile), and every runner
command line README.md and docs/ show composes and validates as a whole, the way ``runner`` checks a
command line before it runs (each override alone: tests/test_suggested_overrides.py)."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config import compose, load
from runner.config.tune import load_tune, split_overrides
from tests.hf_models import refused_without_vision

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _example() -> str:
    section = README.read_text().split("## Using the strategy in your own Trainer", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README lost its CompileStrategy example"
    return match.group(1)


@pytest.mark.slow
def test_readme_example_trains_as_a_script(tmp_path: Path) -> None:
    """``python example.py``, as a user runs it: 50 steps, compiled by Inductor in the first step (its
    module is defined in ``__main__``, which a compile process cannot load: the one line says so)."""
    (tmp_path / "example.py").write_text(_example() + """
import json
print("FIGURES " + json.dumps({"steps": trainer.global_step, "loss": float(trainer.callback_metrics["loss"]),
                               "strategy": type(trainer.strategy).__name__, **trainer.strategy.figures()},
                              default=str))
""")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    figures = json.loads(out.split("FIGURES ", 1)[1].splitlines()[0])
    assert figures["strategy"] == "CompileStrategy"  # strategy="compile", registered by import runner
    assert figures["steps"] == 50 and figures["loss"] > 0
    assert figures["compile/frames"] == 1 and figures["dynamic/recompiles"] == 0 and figures["dynamic/compile_s"] > 0
    assert figures["compile/background_outcome"] == "compiled in the run: MyModule defined in __main__"
    assert "MyModule is defined in the script run as __main__" in out
    assert "runner: 1 compile (0 recompiles), 0 graph breaks" in out  # the line README quotes


# -- every command line -------------------------------------------------------------------------------
_RUNNER = re.compile(r"^(?:\.venv/bin/)?(?:python -m runner|runner)(?:\s|$)")
# <run_dir>-style names, shell variables, redirections: not runnable as written. A chat template's <|role|> markers are
# text of an override, and run. ORG/... is a Hub name of the reader's (each form runs against the loopback Hub in
# tests/test_hub.py).
_PLACEHOLDER = re.compile(r"<(?!\|)|(?<!\|)>|\$|\.\.\.|\bNAME\b|\bDIR\b|\bORG/")
_GPU = re.compile(r"\btrainer=gpu\b|accelerator=(cuda|gpu)")


def _command_lines() -> dict[str, str]:
    """Command line -> the page showing it: lines of fenced shell blocks and inline code spans that run
    ``runner``/``python -m runner``, or ``make run`` with ``RECIPE``/``ARGS``."""
    found: dict[str, str] = {}
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        # A shell line ending in a backslash goes on in the next: one command.
        shell = [ln for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, re.S)
                 for ln in re.sub(r"\\\n\s*", " ", block).splitlines()]
        inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        for line in [*shell, *inline]:
            line = line.split(" #", 1)[0].strip()
            if (_RUNNER.match(line) or line.startswith("make run")) and not _PLACEHOLDER.search(line):
                found.setdefault(line, str(page.relative_to(ROOT)))
    return found


def _overrides(line: str) -> list[list[str]]:
    """Every combination of overrides the command line runs (a ``-m`` sweep: one per combination)."""
    words = shlex.split(line)
    if words[0] == "make":
        make = dict(w.split("=", 1) for w in words[2:] if "=" in w)
        words = [f"+recipe={make.get('RECIPE', 'quickstart')}", *shlex.split(make.get("ARGS", ""))]
    args = [w for w in words if "=" in w and not w.startswith("-")]
    choices = [[a] if a.partition("=")[2].startswith(("[", "{")) else
               [f"{a.partition('=')[0]}={v}" for v in a.partition("=")[2].split(",")] for a in args]
    return [list(c) for c in itertools.product(*choices)]


COMMANDS = _command_lines()


def test_the_scan_finds_the_commands_users_read() -> None:
    assert "make run" in COMMANDS and ".venv/bin/python -m runner +recipe=quickstart" in COMMANDS
    assert any(line.startswith("runner tune") for line in COMMANDS)
    assert any(" -m " in line for line in COMMANDS)
    assert len(COMMANDS) >= 15


@pytest.mark.parametrize("line", sorted(COMMANDS), ids=str)
def test_every_command_line_composes_and_validates(line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    if "compile.cache=redis" in line:  # a shared cache needs the cluster's secret, which the page must say to set
        assert "export RUNNER_COMPILE_CACHE_SECRET" in (ROOT / COMMANDS[line]).read_text(), COMMANDS[line]
        monkeypatch.setenv("RUNNER_COMPILE_CACHE_SECRET", "the-cluster's-secret-0123456789")
    tune = line.split()[:2] == ["runner", "tune"] or " runner tune " in f" {line} "
    for overrides in _overrides(line):
        run, tune_overrides = split_overrides(overrides) if tune else (overrides, [])
        load_tune(tune_overrides)
        cfg = compose(run, run_dir=str(tmp_path))
        if _GPU.search(line):  # validating would ask this machine for a CUDA device: composing is the check
            continue
        if refused_without_vision(cfg):  # model=timm where timm does not import: refused with the install line
            continue
        load(cfg)  # every cross-group check, as before a real run (ConfigError names the problem)
