"""runner as an installed tool: the wheel ships its config groups, recipes and a ``runner`` command,
and works from any directory, without the checkout.

The wheel is built once (its contents checked); CI's check installs it into a fresh virtual environment outside
the checkout with the pinned constraints, asserts that ``runner`` is imported from there, and runs the example
project's three commands and a recipe on the data runner ships as real processes; then the same wheel with
``datasets`` and ``pyarrow`` installed by ``pip install --target`` into a folder outside any ``site-packages``, put
first on ``PYTHONPATH``, trains on labelled rows held in memory (``datasets`` fingerprints those with dill, which
pickled pyarrow by value there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_project"
EXAMPLE_RECIPE = "conv_lm_quick"
# What a source checkout holds that a build must not see (and must not write into).
_NOT_SOURCE = (".venv", ".git", "outputs", "multirun", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
               "wandb", "lightning_logs", ".cache")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "WANDB_MODE": "offline", **extra}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the checkout (a build writes build/ and *.egg-info in place)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp / "dist"), str(src)], check=True, env=_env(), timeout=600)
    (built,) = (tmp / "dist").glob("runner-*.whl")
    return built


@pytest.mark.slow
def test_wheel_ships_config_recipes_and_the_runner_command(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    shipped_conf = {n.removeprefix("runner/_conf/") for n in names if n.startswith("runner/_conf/")}
    assert shipped_conf == {p.relative_to(ROOT / "conf").as_posix() for p in (ROOT / "conf").rglob("*.yaml")
                            if not p.relative_to(ROOT / "conf").as_posix().startswith("recipe/")}
    assert {f"runner/_recipes/{p.name}" for p in (ROOT / "recipes").glob("*.yaml")} <= names
    assert {f"runner/_data/{p.name}" for p in (ROOT / "examples" / "data").glob("*.jsonl")} <= names  # recipes' data
    assert "runner = runner.__main__:main" in entry_points
    assert not any(n.startswith(("conf/", "recipes/", "tests/", "examples/")) for n in names)  # nothing top-level


# A classifier of the test's own for a run on labelled text (the fresh venv has no transformers): mean byte embedding.
BAG_OF_BYTES = """
import torch
from torch import nn


class BagOfBytes(nn.Module):
    def __init__(self, num_labels: int = 4, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(257, width)
        self.head = nn.Linear(width, num_labels)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.embed(batch["input_ids"]))
"""
OVERLAID = ("runner", "datasets", "pyarrow", "dill")


@pytest.mark.slow
def test_fresh_venv_runs_the_example_project(wheel: Path, tmp_path: Path) -> None:
    """CI: install the wheel with the pinned constraints into a new virtual environment outside the
    checkout; from a copy of the example project run the three commands a user starts with. Then a
    ``pip install --target`` folder on ``PYTHONPATH`` (see the module docstring) trains there too."""
    venv, project = tmp_path / "venv", tmp_path / "my_project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", "outputs"))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # --no-compile: pip would byte-compile every installed module (torch's thousands of files) up front;
    # Python compiles what the commands import as they import it.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "-c",
                    str(ROOT / "constraints.txt"), str(wheel)], check=True, env=_env(), timeout=1800)
    installed_s = time.perf_counter() - start

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "runner"), *args], cwd=project, env=_env(), capture_output=True,
                              text=True, timeout=900)

    find = "import importlib.util as u; print(u.find_spec('runner').origin)"
    where = subprocess.run([str(venv / "bin" / "python"), "-c", find], cwd=project, env=_env(), capture_output=True,
                           text=True, check=True)
    assert where.stdout.startswith(str(venv)), where.stdout  # the installed runner, not the checkout

    listing = run("--list-recipes")
    assert listing.returncode == 0, listing.stderr[-3000:]
    assert "recipes from ./recipes (this project):" in listing.stdout and EXAMPLE_RECIPE in listing.stdout
    assert "recipes from runner:" in listing.stdout and "smoke " in listing.stdout and "quickstart " in listing.stdout

    fit = run(f"+recipe={EXAMPLE_RECIPE}", "compile.backend=eager")  # the recipe as shipped, without Inductor's compile
    assert fit.returncode == 0, fit.stderr[-3000:]
    (run_dir,) = project.glob(f"outputs/*/*-{EXAMPLE_RECIPE}")
    report = json.loads((run_dir / "report.json").read_text())
    assert report["run/recipe"] == EXAMPLE_RECIPE and report["run/steps"] == 60 and report["val/bpb"] > 0
    assert (run_dir / "checkpoints" / "last.ckpt").exists() and (run_dir / "report.md").exists()
    assert "my_project.model.ConvLM" in (run_dir / ".hydra" / "config.yaml").read_text()

    default = run("trainer.max_steps=3", "compile.backend=eager", "telemetry.speedup_steps=0")
    assert default.returncode == 0, default.stderr[-3000:]
    (default_dir,) = project.glob("outputs/*/*-run")
    assert json.loads((default_dir / "report.json").read_text())["run/steps"] == 3

    # A recipe on the data runner ships (examples/data/instruct.jsonl), from a directory that has none: the wheel's
    # copy. runner's GPT: the core install has no transformers for the recipe's Llama.
    shipped = run("+recipe=instruct_tiny", "model=gpt_tiny", "compile.backend=eager", "data.max_examples=100",
                  "trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.limit_val_batches=1",
                  "telemetry.speedup_steps=0")
    assert shipped.returncode == 0, shipped.stderr[-3000:]
    (shipped_dir,) = project.glob("outputs/*/*-instruct_tiny")
    report = json.loads((shipped_dir / "report.json").read_text())
    assert report["data/source"].startswith(str(venv)) and report["data/source"].endswith("runner/_data/instruct.jsonl")
    commands_s = time.perf_counter() - start - installed_s

    # The overlay: runner and the data layer from a --target folder whose path holds no "site-packages".
    overlay, elsewhere = tmp_path / "overlay", tmp_path / "elsewhere"
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "--no-deps", "--target",
                    str(overlay), "-c", str(ROOT / "constraints.txt"), str(wheel), "datasets", "pyarrow", "dill",
                    "multiprocess"], check=True, env=_env(), timeout=900)
    elsewhere.mkdir()
    (elsewhere / "bag.py").write_text(BAG_OF_BYTES)
    overlaid = _env(PYTHONPATH=str(overlay))
    origins = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.util as u; print(*(u.find_spec(m)"
                              f".origin for m in {OVERLAID!r}))"], cwd=elsewhere, env=overlaid, capture_output=True,
                             text=True, check=True).stdout.split()
    assert len(origins) == len(OVERLAID) and all(o.startswith(str(overlay)) for o in origins), origins
    assert not any("site-packages" in o for o in origins)  # where dill pickled modules by value
    labelled = subprocess.run([str(venv / "bin" / "python"), "-m", "runner", "data=text_classification", "model=custom",
                               "model._target_=bag.BagOfBytes", "compile.backend=eager", "trainer.max_steps=3",
                               "telemetry.speedup_steps=0"], cwd=elsewhere, env=overlaid, capture_output=True,
                              text=True, timeout=900)
    assert labelled.returncode == 0, labelled.stderr[-3000:]
    (labelled_dir,) = elsewhere.glob("outputs/*/*-run")
    report = json.loads((labelled_dir / "report.json").read_text())
    assert report["run/steps"] == 3 and report["data/source"].startswith("the Python stdlib task"), report
    print(f"\nfresh venv + wheel install: {installed_s:.0f} s; example commands: {commands_s:.0f} s; --target "
          f"overlay install and a run on labelled rows: {time.perf_counter() - start - installed_s - commands_s:.0f} s")


def test_readme_section_shows_the_example_ci_runs() -> None:
    """README's "Your own project" links the example, whose page shows its files as they are."""
    readme = (ROOT / "README.md").read_text()
    heading = "## Your own project"
    assert heading in readme
    assert "(examples/my_project/README.md)" in readme.split(heading, 1)[1].split("\n## ", 1)[0]
    section = (EXAMPLE / "README.md").read_text().split("## The files", 1)[1]
    for name in ("conf/model/conv_lm.yaml", f"recipes/{EXAMPLE_RECIPE}.yaml"):
        assert (EXAMPLE / name).read_text() in section, name
    model = (EXAMPLE / "my_project" / "model.py").read_text().splitlines()
    assert next(ln for ln in model if "def __init__" in ln) in section
