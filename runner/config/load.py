"""From Hydra's composed ``DictConfig`` to a validated ``RunConfig``, once, at the boundary; and the
recipes runner can see (the user's project first, then runner's own)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runner.config import store
from runner.config.errors import ConfigError
from runner.config.schema import RunConfig
from runner.config.store import CONF_DIR, RECIPES_DIR, builtin_layer, register_configs, user_layers

__all__ = ["CONF_DIR", "RECIPES_DIR", "ConfigError", "Recipe", "compose", "list_recipes", "load", "recipes"]


def load(cfg: DictConfig) -> RunConfig:
    """Convert the composed config to typed objects (running each ``__post_init__``) and validate
    the combination of groups. Raises ``ConfigError`` before anything expensive happens."""
    from runner.config.precheck import explain
    from runner.config.validate import validate

    try:
        run_cfg = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:  # e.g. model=custom without model._target_
        raise ConfigError(explain(e)) from e
    assert isinstance(run_cfg, RunConfig)
    validate(run_cfg)
    return run_cfg


def compose(overrides: Sequence[str] = (), run_dir: str | None = None,
            config_dirs: Sequence[str | Path] | None = None) -> DictConfig:
    """Compose the config the way ``runner`` does (the current directory's ``conf/`` and ``recipes/``
    first, then ``config_dirs`` as with ``--config-dir``, then runner's own), for tests and notebooks."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    previous = store.config_dirs()
    if config_dirs is not None:
        store.set_config_dirs(config_dirs)
    extra = [] if run_dir is None else [f"run_dir={run_dir}", "name=run"]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            return hydra_compose("config", overrides=[*overrides, *extra])
    finally:
        store.set_config_dirs(previous)


@dataclass(frozen=True)
class Recipe:
    """A recipe file: ``+recipe=name``. ``active`` is False when a recipe of the same name earlier in
    the search path (the user's) replaces it."""

    name: str
    description: str
    origin: str
    path: Path
    active: bool


def _description(path: Path) -> str:
    """The first comment line that is not Hydra's ``@package`` header."""
    lines = [ln[1:].strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.startswith("#")]
    desc = [ln for ln in lines if not ln.startswith("@package")]
    return desc[0] if desc else ""


def _origin(label: str, recipes_dir: Path) -> str:
    if label == "runner":
        return "runner"
    try:
        return f"./{recipes_dir.resolve().relative_to(Path.cwd().resolve())}"
    except ValueError:
        return str(recipes_dir)


def list_recipes() -> list[Recipe]:
    """Every recipe in search-path order: the project's first, then runner's (marked inactive when
    shadowed by a project recipe of the same name)."""
    seen: set[str] = set()
    out: list[Recipe] = []
    for layer in [*user_layers(), builtin_layer()]:
        if layer.recipes is None:
            continue
        for path in sorted(layer.recipes.rglob("*.yaml")):
            name = path.relative_to(layer.recipes).with_suffix("").as_posix()
            out.append(Recipe(name, _description(path), _origin(layer.label, layer.recipes), path, name not in seen))
            seen.add(name)
    return out


def recipes() -> dict[str, str]:
    """Every recipe ``+recipe=NAME`` selects, with its one-line description."""
    return {r.name: r.description for r in list_recipes() if r.active}
