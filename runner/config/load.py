"""From Hydra's composed ``DictConfig`` to a validated ``RunConfig``, once, at the boundary."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runner.config.errors import ConfigError
from runner.config.schema import RunConfig
from runner.config.store import register_configs

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
RECIPES_DIR = CONF_DIR.parent / "recipes"


def load(cfg: DictConfig) -> RunConfig:
    """Convert the composed config to typed objects (running each ``__post_init__``) and validate
    the combination of groups. Raises ``ConfigError`` before anything expensive happens."""
    from runner.config.validate import validate

    try:
        run_cfg = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError(f"invalid config: {e}") from e
    assert isinstance(run_cfg, RunConfig)
    validate(run_cfg)
    return run_cfg


def compose(overrides: Sequence[str] = (), run_dir: str | None = None) -> DictConfig:
    """Compose ``conf/`` the way ``python -m runner`` does, for tests and notebooks."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    extra = [] if run_dir is None else [f"run_dir={run_dir}", "name=run"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return hydra_compose("config", overrides=[*overrides, *extra])


def recipes() -> dict[str, str]:
    """Every recipe's name and its one-line description (the first comment after ``@package``)."""
    out: dict[str, str] = {}
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        lines = [ln[1:].strip() for ln in path.read_text().splitlines() if ln.startswith("#")]
        desc = [ln for ln in lines if not ln.startswith("@package")]
        out[path.stem] = desc[0] if desc else ""
    return out
