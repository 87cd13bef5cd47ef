"""A run opened for what comes after training: its directory, its config (``.hydra/overrides.yaml`` composed again,
so nothing is typed twice), a checkpoint, and the model rebuilt with its weights. Problems are ``ConfigError``s."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.config import ConfigError, compose
from runner.config.checks.inputs import read_checkpoint
from runner.config.composing.hub_names import localize
from runner.config.composing.loading import convert
from runner.config.composing.messages import explain
from runner.config.composing.precheck import command_line, search_dirs
from runner.config.paths import checkpoint_dir, last_checkpoint_path
from runner.config.schema import RunConfig

if TYPE_CHECKING:  # torch and Lightning load when a model does: a bad command line is refused before either
    import lightning as L
    from torch import nn

OVERRIDES = Path(".hydra") / "overrides.yaml"
CONFIG = Path(".hydra") / "config.yaml"
ALLOW_CHANGED_DATA = "after.allow_changed_data"
RUN_KEYS = ("hydra.run.dir", "ckpt_path", ALLOW_CHANGED_DATA)  # where and from what a run resumed: never carried
# What compiling and saved-activation checkpointing put in a module's state-dict keys: a plain module has neither.
_WRAPPERS = re.compile(r"(^|\.)(_orig_mod|_checkpoint_wrapped_module)\.")


def override_key(override: str) -> str:
    """The key an override sets: ``+recipe=smoke`` -> ``recipe``, ``~model.path`` -> ``model.path``."""
    return override.lstrip("+~").split("=", 1)[0]


def merge_overrides(saved: Sequence[str], given: Sequence[str]) -> list[str]:
    """``saved`` with each override of ``given`` in place of the saved one of the same key, the new ones after."""
    keys = {override_key(o) for o in given}
    return [*(o for o in saved if override_key(o) not in keys), *given]


def run_dir_error(path: Path) -> str | None:
    """Why ``path`` is not a run directory, in one paragraph; None when it is one."""
    fix = ("Give the directory of a run, as `python -m runner` writes it (outputs/<date>/<time>-<name>/, the newest: "
           "`ls -dt outputs/*/*/ | head -1`; a sweep's jobs: outputs/multirun/<date>/<time>/<job>/).")
    if not path.exists():
        return f"{path} does not exist. {fix}"
    if not path.is_dir():
        return f"{path} is a file, not a run directory. {fix}"
    if not (path / OVERRIDES).is_file():
        return (f"{path} is not a run directory: it has no {OVERRIDES}, the command line Hydra saves in every run "
                f"directory. {fix}")
    return None


def saved_overrides(run_dir: Path) -> list[str]:
    """The run's command line as Hydra saved it, without where it last resumed (``RUN_KEYS``)."""
    from omegaconf import OmegaConf

    saved = OmegaConf.to_container(OmegaConf.load(run_dir / OVERRIDES))
    assert isinstance(saved, list), f"{run_dir / OVERRIDES} holds a list of overrides"
    return [str(o) for o in saved if override_key(str(o)) not in RUN_KEYS]


def run_config(run_dir: Path, given: Sequence[str] = (), validated: bool = True) -> RunConfig:
    """The run's config from its saved command line with ``given`` in place, checked (``validated``) for building
    its model and data but not its trainer (a GPU run is exported on machines without one)."""
    if (problem := run_dir_error(run_dir)) is not None:
        raise ConfigError(problem)
    overrides = merge_overrides(saved_overrides(run_dir), given)
    try:
        cfg = convert(compose_run(run_dir, overrides))
        localize(cfg)  # the Hub names the run recorded, at their commits, from the cache
    except ConfigError:
        raise
    except Exception as e:  # Hydra's and OmegaConf's own errors, worded as a run's are
        raise ConfigError(f"{run_dir}: its saved command line ({' '.join(overrides)}) no longer composes: "
                          f"{explain(e)}") from e
    if validated:
        check(cfg)
    return cfg


def compose_run(run_dir: Path, overrides: Sequence[str]) -> Any:
    """The config ``overrides`` (a command line) compose to, as ``python -m runner`` composes it for ``run_dir``."""
    args = command_line(list(overrides))
    dirs = search_dirs(args) if args is not None else []
    plain = [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]
    return compose(plain, run_dir=str(run_dir), config_dirs=dirs or None)


def check(cfg: RunConfig) -> None:
    """Raise ``ConfigError`` with what stops the model from being built or the data from being read."""
    from runner.config.checks import inputs as input_checks
    from runner.config.checks import run as checks_run

    checks = (input_checks.check_targets, checks_run.check_data_path, input_checks.check_data_arguments,
              input_checks.check_model_arguments)
    problems = [message for c in checks if (message := c(cfg))]
    if problems:
        raise ConfigError(" ".join(problems))


def checkpoint_path(run_dir: Path, ckpt: str) -> Path:
    """``last``, ``best`` or a path (as given, else under the run directory) -> the checkpoint file."""
    fix = f"Give --ckpt last, or a checkpoint file (those of this run: {checkpoint_dir(run_dir)}/)."
    if ckpt == "last":
        path = last_checkpoint_path(run_dir)
        if not path.is_file():
            raise ConfigError(f"{run_dir} has no checkpoints/last.ckpt: the run stopped before its first checkpoint "
                              "(trainer.checkpoint_every_n_steps) or was not trained there. Give --ckpt with a "
                              "checkpoint file, or train the run on (python -m runner resume RUN_DIR).")
        return path
    if ckpt == "best":  # the best checkpoint ModelCheckpoint recorded in last.ckpt, when it monitored a metric
        last, best = last_checkpoint_path(run_dir), None
        ckpt_state, _ = read_checkpoint(last) if last.is_file() else (None, None)
        for key, state in ((ckpt_state or {}).get("callbacks") or {}).items():
            found = state.get("best_model_path") if str(key).startswith("ModelCheckpoint") else None
            best = best or (Path(found) if found and Path(found).is_file() else None)
        if best is None:
            raise ConfigError(f"--ckpt best: {run_dir} kept no best checkpoint (runner's checkpointing saves "
                              f"last.ckpt and monitors no metric). {fix}")
        return best
    path = Path(ckpt).expanduser()
    for candidate in (path, run_dir / path):
        if candidate.is_file():
            return candidate
    if path.is_dir():
        raise ConfigError(f"--ckpt {ckpt} is a directory (an FSDP run's sharded checkpoint is one): give one file; "
                          "an FSDP run writes one with trainer.fsdp.consolidate=true (checkpoints/consolidated.pt). "
                          f"{fix}")
    raise ConfigError(f"--ckpt {ckpt} does not exist. {fix}")


def checkpoint_state(path: Path) -> tuple[dict[str, Any], int | None]:
    """The model's weights in a checkpoint file (without wrappers in their keys), and the step it was saved at."""
    ckpt, error = read_checkpoint(path)
    fix = "Give another checkpoint (--ckpt last, or a file of the run's checkpoints/)."
    if error is not None:
        raise ConfigError(f"{path} is not a checkpoint torch can load ({error}): it is cut short (a copy or a "
                          f"write that stopped early) or not a checkpoint. {fix}")
    if isinstance(ckpt, dict) and isinstance(ckpt.get("state_dict"), dict):
        return clean_state(ckpt["state_dict"]), ckpt.get("global_step")
    if isinstance(ckpt, dict) and ckpt and all(hasattr(v, "shape") for v in ckpt.values()):
        return clean_state(ckpt), None  # trainer.fsdp.consolidate's checkpoints/consolidated.pt
    raise ConfigError(f"{path} holds no model weights (no 'state_dict'). {fix}")


def clean_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with ``_orig_mod.`` and ``_checkpoint_wrapped_module.`` taken out of its keys."""
    return {_WRAPPERS.sub(r"\1", k): v for k, v in state.items()}


def is_clean(module: nn.Module) -> bool:
    """Whether ``module``'s state-dict keys carry no compile or checkpointing wrapper."""
    return not any(_WRAPPERS.search(k) for k in module.state_dict())


def inner_model(module: nn.Module) -> nn.Module:
    """The model runner's ``TrainModule`` trains (its ``model``), or the module itself (a user's LightningModule)."""
    from runner.training.module import TrainModule

    return module.model if isinstance(module, TrainModule) else module


@dataclass
class Trained:
    """A trained model, ready to use: the run's config, the module built from it with a checkpoint's weights."""

    run_dir: Path
    cfg: RunConfig
    module: L.LightningModule
    checkpoint: Path
    step: int | None

    @property
    def model(self) -> nn.Module:
        return inner_model(self.module)


def open_trained(run_dir: Path, ckpt: str = "last", cfg: RunConfig | None = None) -> Trained:
    """The run's model (``cfg``, else the run's config) with the weights of ``ckpt``, on the CPU, in eval mode."""
    from runner.build import build_module

    path = checkpoint_path(run_dir, ckpt)  # the checkpoint first: a missing or cut one is refused before composing
    state, step = checkpoint_state(path)
    cfg = cfg or run_config(run_dir)
    # The run's seed first, as the run set it before building: a model built from its configuration starts from the
    # same weights, and so does what was frozen from them (a preference objective's reference).
    import lightning as L

    L.seed_everything(cfg.seed, verbose=False)
    module = build_module(cfg)
    try:
        missing, unexpected = module.load_state_dict(state, strict=False)
        what = (f"{len(missing)} of the model's weights are not in it (e.g. {missing[0]})" if missing else
                f"{len(unexpected)} of its weights are not in the model (e.g. {unexpected[0]})" if unexpected else "")
    except RuntimeError as e:  # a weight of another shape
        what = str(e).strip().splitlines()[-1].strip()
    if what:
        raise ConfigError(f"{path} does not hold the weights of the model {run_dir}'s config builds: {what}. Give a "
                          "checkpoint of this run (--ckpt last).")
    return Trained(run_dir, cfg, module.eval(), path, step)
