"""A new user's first runs, as real ``python -m runner`` processes (what ends before a run starts, through the
same entry point in this process: ``tests/cli.py``): no recipe, ``--help`` and Hydra's
other flags, a project of their own (its recipes, config options, model, LightningModule and
LightningDataModule) layered over runner's, text of any name, a clean console, and every bad input
refused up front (exit 2, one paragraph, no traceback, nothing written).

Each test here failed before runner was installable into a user's project (issue 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from runner.config import compose
from runner.config.checks import inputs as checks
from runner.config.schema import RunConfig
from tests.cli import Outcome, run_cli

ROOT = Path(__file__).resolve().parents[1]
# Seconds per run: Dynamo's eager backend, a few steps, no speedup pairs.
QUICK = ["compile.backend=eager", "trainer.max_steps=2", "telemetry.speedup_steps=0", "trainer.limit_val_batches=1",
         "data.max_bytes=200000"]
# Launchers a CI machine may run under: with them, trainer.num_nodes=2 would be a real multi-node job.
_LAUNCH_VARS = ("SLURM_", "LSB_", "OMPI_", "PMI_", "TORCHELASTIC_", "NODE_RANK", "GROUP_RANK", "WORLD_SIZE")


def in_process(*args: str, cwd: Path, **env: str) -> Outcome:
    """What ends before a run starts (``--help``, ``--cfg``, a refusal), through the same entry point in this
    process (``tests/cli.py``), with the launchers' variables and PYTHONWARNINGS unset as ``runner`` below does."""
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith(_LAUNCH_VARS) or k == "PYTHONWARNINGS"}
    return run_cli(*args, cwd=cwd, env={**unset, **env})


def runner(*args: str, cwd: Path, timeout: int = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m runner`` as a user types it (warnings left on: the console is under test)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCH_VARS) and k != "PYTHONWARNINGS"}
    full_env = {**base, "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


PROJECT = {
    "mypkg/__init__.py": "",
    "mypkg/net.py": """
        import torch
        from torch import nn


        class Net(nn.Module):
            def __init__(self, width: int = 16) -> None:
                super().__init__()
                self.embed, self.head = nn.Embedding(256, width), nn.Linear(width, 256)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.head(torch.tanh(self.embed(x)))
        """,
    "mypkg/lit.py": """
        import lightning as L
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Lit(L.LightningModule):
            def __init__(self, features: int = 8, lr: float = 0.05) -> None:
                super().__init__()
                self.net, self.lr = nn.Linear(features, 2), lr

            def training_step(self, batch, batch_idx):
                loss = F.cross_entropy(self.net(batch[0]), batch[1])
                self.log("train/loss", loss)
                return loss

            def validation_step(self, batch, batch_idx):
                self.log("val/loss", F.cross_entropy(self.net(batch[0]), batch[1]))

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=self.lr)
        """,
    "mypkg/data.py": """
        import lightning as L
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        class Blobs(L.LightningDataModule):
            def __init__(self, features: int = 8, batch_size: int = 16) -> None:
                super().__init__()
                g = torch.Generator().manual_seed(0)
                x = torch.randn(256, features, generator=g)
                self.data, self.batch_size = TensorDataset(x, (x.sum(1) > 0).long()), batch_size

            def train_dataloader(self):
                return DataLoader(self.data, batch_size=self.batch_size, shuffle=True, drop_last=True)

            def val_dataloader(self):
                return DataLoader(self.data, batch_size=self.batch_size)
        """,
    "conf/model/net.yaml": """
        # The project's own nn.Module.
        _target_: mypkg.net.Net
        width: 16
        """,
    "conf/model/lit.yaml": """
        _target_: mypkg.lit.Lit
        features: 8
        """,
    "conf/data/blobs.yaml": """
        _target_: mypkg.data.Blobs
        features: 8
        """,
    "recipes/mine.yaml": """
        # @package _global_
        # The project's Net on the project's own text files (no extensions).
        defaults:
          - override /model: net
        recipe: mine
        data: {path: corpus, seq_len: 16, batch_size: 4}
        compile: {backend: eager}
        trainer: {max_steps: 4, val_check_interval: 2, limit_val_batches: 1, checkpoint_every_n_steps: 2}
        telemetry: {speedup_steps: 0}
        """,
    "recipes/lit.yaml": """
        # @package _global_
        # The project's LightningModule and LightningDataModule.
        defaults:
          - override /model: lit
          - override /data: blobs
        recipe: lit
        compile: {backend: eager}
        trainer: {max_steps: 4, val_check_interval: 2, limit_val_batches: 1, checkpoint_every_n_steps: 2}
        telemetry: {speedup_steps: 0}
        """,
    "recipes/bad.yaml": """
        # @package _global_
        # Sizes a GPT, but selects the project's Net.
        defaults:
          - override /model: net
        recipe: bad
        model: {n_layer: 2}
        """,
    "corpus/notes": "Notes of the project, in plain text without an extension.\n" * 80,
    "corpus/story": "Once upon a time a model read every text file, whatever its name.\n" * 80,
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project: a package, config options, recipes and text, runner installed elsewhere."""
    return _write(tmp_path_factory.mktemp("project"), PROJECT)


def _report(run_root: Path) -> dict:
    reports = list(run_root.glob("outputs/*/*/report.json"))
    assert len(reports) == 1, reports
    return json.loads(reports[0].read_text())


# -- no recipe, --help and Hydra's flags ---------------------------------------------------------------
@pytest.mark.slow
def test_no_recipe_runs_the_default_job(tmp_path: Path) -> None:
    proc = runner(*QUICK, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = tmp_path.glob("outputs/*/*-run")  # the job is named "run" when no recipe is given
    report = json.loads((run_dir / "report.json").read_text())
    assert report["run/steps"] == 2 and report["run/recipe"] is None
    assert (run_dir / "checkpoints" / "last.ckpt").exists()


def test_help_lists_groups_recipes_and_how_to_add_your_own(project: Path) -> None:
    proc = in_process("--help", cwd=project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Traceback" not in proc.stderr
    assert "Usage: runner" in out and "== Add your own ==" in out and "--config-dir" in out and "_target_" in out
    # runner's groups and the project's own (lit, net), in one sorted list
    assert "model: custom, gpt, gpt_tiny, hf_causal_lm, hf_classifier, lit, mlp, net, timm" in out
    assert "_schema" not in out
    recipes = out.split("== Recipes (+recipe=NAME) ==")[1].split("==")[0]
    assert "recipes from ./recipes (this project)" in recipes and "recipes from runner" in recipes
    assert "mine " in recipes and "quickstart" in recipes


@pytest.mark.slow
def test_hydra_flags_without_a_recipe(project: Path, tmp_path: Path) -> None:
    cfg = in_process("--cfg", "job", cwd=project)
    assert cfg.returncode == 0 and "_target_: runner.models.gpt.GPT" in cfg.stdout, cfg.stderr[-2000:]
    info = in_process("--info", "searchpath", cwd=project)
    assert info.returncode == 0, info.stderr[-2000:]
    assert f"runner-groups://{project}/conf" in info.stdout and f"runner-recipes://{project}/recipes" in info.stdout
    query = in_process("-sc", "query=bash", cwd=project, COMP_LINE="runner model=", COMP_POINT="13")
    assert query.returncode == 0 and "model=net" in query.stdout and "model=gpt" in query.stdout, query.stderr
    # Hydra runs the jobs one after another in one process, each compiling the same training_step: job 1 (bf16
    # saved-tensor hooks) must compile its own graph, not "recompile" job 0's.
    sweep = runner("-m", *QUICK, "offload=none,bf16", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    reports = {r.parent.name.split("-")[0]: json.loads(r.read_text())
               for r in (tmp_path / "sweep").glob("*/report.json")}
    assert sorted(reports) == ["0", "1"] and reports["1"]["offload/strategy"] == "bf16"
    for job in reports.values():
        assert job["compile/recompiles"] == 0, job["compile/recompile_reasons"]
        assert [e["kind"] for e in job["compile/events"]][0] == "compile"


# -- the user's project over runner's ------------------------------------------------------------------
@pytest.mark.slow
def test_project_recipe_trains_the_projects_model_on_its_extensionless_text(project: Path, tmp_path: Path) -> None:
    proc = runner("+recipe=mine", f"hydra.run.dir={tmp_path / 'run'}", cwd=project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["run/steps"] == 4 and report["run/recipe"] == "mine"
    assert report["run/params"] == 256 * 16 + 16 * 256 + 256  # mypkg.net.Net(width=16)
    assert report["data/unigram_bpb"] > 0  # corpus/notes and corpus/story, files without an extension
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()


@pytest.mark.slow
def test_project_lightning_module_and_datamodule(project: Path, tmp_path: Path) -> None:
    proc = runner("+recipe=lit", f"hydra.run.dir={tmp_path / 'run'}", cwd=project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["run/steps"] == 4 and report["run/params"] == 8 * 2 + 2


@pytest.mark.slow
def test_a_recipe_does_not_leak_into_another_model_and_the_console_is_clean(project: Path, tmp_path: Path) -> None:
    """smoke sizes the GPT in its model option (gpt_tiny); another model gets none of it."""
    proc = runner("+recipe=smoke", "model=custom", "model._target_=mypkg.net.Net", "+model.width=8",
                  "telemetry.speedup_steps=0", f"hydra.run.dir={tmp_path / 'run'}", cwd=project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "report.json").read_text())["run/params"] == 256 * 8 + 8 * 256 + 256
    console = proc.stdout + proc.stderr
    for noise in ("litlogger", "LeafSpec", "FLOPs", "TPU available", "Traceback"):
        assert noise not in console, noise
    assert "runner: smoke" in console and "Trainable params" in console  # runner's summary, the model summary


def test_project_files_replace_runner_files_of_the_same_name(tmp_path: Path) -> None:
    project = _write(tmp_path / "p", {"recipes/smoke.yaml": "# @package _global_\n# Mine.\ntrainer: {max_steps: 3}\n",
                                      "conf/model/gpt.yaml": "defaults: [gpt_schema, _self_]\nn_layer: 1\n"})
    cfg = in_process("+recipe=smoke", "--cfg", "job", cwd=project)
    assert cfg.returncode == 0, cfg.stderr[-2000:]
    job = OmegaConf.create(cfg.stdout)
    assert job.trainer.max_steps == 3 and job.model.n_layer == 1  # the project's smoke and model/gpt.yaml
    # A directory in Hydra's own layout (<group>/, recipe/), given with hydra.searchpath or --config-dir.
    other = _write(tmp_path / "other", {"recipe/extra.yaml": "# @package _global_\n# From another dir.\nseed: 7\n"})
    extra = in_process("+recipe=extra", f"hydra.searchpath=[{other}]", "--cfg", "job", cwd=project)
    assert extra.returncode == 0 and OmegaConf.create(extra.stdout).seed == 7, extra.stderr[-2000:]
    listing = in_process("--list-recipes", "--config-dir", str(other), cwd=project)
    assert listing.returncode == 0, listing.stderr
    assert "recipes from ./recipes (this project)" in listing.stdout and f"recipes from {other}" in listing.stdout
    smoke_lines = [ln for ln in listing.stdout.splitlines() if ln.strip().startswith("smoke ")]
    assert len(smoke_lines) == 2 and "replaced by ./recipes/smoke.yaml" in smoke_lines[1]


# -- bad input: one paragraph, exit 2, nothing written -------------------------------------------------
def _bad_files(root: Path) -> dict[str, Path]:
    (root / "binary").mkdir(parents=True)
    (root / "binary" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (root / "tiny.txt").write_text("too little text\n")
    (root / "notes.ckpt").write_text("not a checkpoint\n")
    torch.save({"state_dict": {"model.tok_emb.weight": torch.zeros(256, 8)}, "global_step": 4}, root / "other.ckpt")
    return {"binary": root / "binary", "tiny": root / "tiny.txt", "text_ckpt": root / "notes.ckpt",
            "other_ckpt": root / "other.ckpt"}


# (arguments, with {name} for a file from _bad_files or {project}; fragments the paragraph must hold)
BAD_INPUTS: list[tuple[list[str], list[str]]] = [
    (["data.path={binary}"], ["data.path=", "no non-empty text", "binary or not UTF-8"]),
    (["data.path={tiny}"], ["data.path=", "bytes of text", "data.seq_len"]),
    (["trainer.devices=0"], ["trainer.devices=0", ">= 1"]),
    (["trainer.num_nodes=2"], ["trainer.num_nodes=2", "torchrun", "trainer.num_nodes=1"]),
    (["ckpt_path={text_ckpt}"], ["ckpt_path=", "not a checkpoint torch can load", "last.ckpt"]),
    (["ckpt_path={other_ckpt}"], ["ckpt_path=", "another model", "model.tok_emb.weight", "[256, 8]"]),
    (["model=custom", "model._target_=nope.Net"], ["model._target_=nope.Net", "cannot be imported", "nope"]),
    (["--config-dir", "{binary}/missing"], ["--config-dir", "no such directory"]),
    (["data=synthetic"], ["recipe smoke sets data.seq_len", "data=synthetic", "seq_len"]),
]


@pytest.mark.parametrize(("args", "fragments"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_paragraph_exit_2_nothing_written(args: list[str], fragments: list[str],
                                                            tmp_path: Path) -> None:
    files = _bad_files(tmp_path / "files")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = in_process("+recipe=smoke", *(a.format(**files) for a in args), cwd=cwd)
    _assert_refused(proc, fragments)
    assert list(cwd.iterdir()) == [], "nothing may be written (no outputs/ run dir)"


def test_project_recipe_field_the_model_lacks(project: Path) -> None:
    proc = in_process("+recipe=bad", cwd=project)
    _assert_refused(proc, ["model.n_layer=2", "mypkg.net.Net", "recipe bad", "n_layer", "override /model"])
    assert not (project / "outputs").exists()


def _assert_refused(proc: Outcome, fragments: list[str]) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("runner: "), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in: {lines[0]}"


# -- the same checks, in-process (fast): each input check on its own -----------------------------------
def _cfg(*overrides: str, tmp_path: Path) -> RunConfig:
    """The composed, typed config without validation: the check under test runs alone."""
    obj = OmegaConf.to_object(compose(["+recipe=smoke", *overrides], run_dir=str(tmp_path)))
    assert isinstance(obj, RunConfig)
    return obj


@pytest.mark.parametrize(("overrides", "check", "fragment"), [
    (["trainer.devices=abc"], checks.check_devices, "trainer.devices='abc'"),
    (["trainer.devices=-1"], checks.check_devices, "trainer.devices=-1"),
    (["trainer.devices=[0,1]"], checks.check_devices, "trainer.devices=[0, 1] on the CPU"),
    (["trainer.num_nodes=0"], checks.check_num_nodes, "trainer.num_nodes=0"),
    (["data.path={tmp}"], checks.check_data_arguments, "holds no non-empty text files"),
    (["ckpt_path={tmp}"], checks.check_ckpt_path, "is a directory"),
    (["model=custom", "model._target_=torch.nn.Linear", "+model.in_features=4", "+model.out_features=4",
      "+model.n_layer=2"], checks.check_target_fields, "model.n_layer=2: torch.nn.Linear"),
    (["optimizer._target_=torch.optim.AdamWW"], checks.check_targets, "optimizer._target_=torch.optim.AdamWW"),
])
def test_input_check_names_key_value_and_fix(overrides: list[str], check: checks.Check, fragment: str,
                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith(_LAUNCH_VARS):
            monkeypatch.delenv(key)
    message = check(_cfg(*(o.format(tmp=tmp_path) for o in overrides), tmp_path=tmp_path))
    assert message is not None and fragment in message and "\n" not in message, message


@pytest.mark.parametrize("overrides", [
    [], ["trainer.devices=2"], ["trainer.devices=auto"], ["data.path=README.md"],
    ["model=custom", "model._target_=torch.nn.Linear", "+model.in_features=4", "+model.out_features=4"],
])
def test_input_checks_accept_good_input(overrides: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    cfg = _cfg(*overrides, tmp_path=tmp_path)
    assert [msg for check in checks.CHECKS if (msg := check(cfg))] == []


def test_checkpoint_of_the_same_model_is_accepted(tmp_path: Path) -> None:
    from hydra.utils import instantiate

    cfg = _cfg(tmp_path=tmp_path)
    model = instantiate(cfg.model)
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, tmp_path / "same.ckpt")
    cfg.ckpt_path = str(tmp_path / "same.ckpt")
    assert checks.check_ckpt_path(cfg) is None
