"""From Hydra's composed ``DictConfig`` to a validated ``RunConfig``, once, at the boundary; and ``compose``, the way
``runner`` composes, for tests and notebooks."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runner.config.checks.validate import notes, validate
from runner.config.composing import layers
from runner.config.composing.hub_names import localize
from runner.config.composing.layers import CONF_DIR
from runner.config.composing.messages import explain, unknown_key
from runner.config.composing.store import register_configs
from runner.config.errors import ConfigError
from runner.config.paths import shipped
from runner.config.schema import RunConfig

__all__ = ["ConfigError", "compose", "convert", "load"]

log = logging.getLogger(__name__)


def load(cfg: DictConfig) -> RunConfig:
    """The config a run runs: converted, its Hub names resolved, validated (``ConfigError`` before anything is
    built), and its notes said, once: the precheck before Hydra's job validates without saying them."""
    run_cfg = checked(cfg)
    for message in notes(run_cfg):
        log.warning("config warning: %s", message)
    return run_cfg


def checked(cfg: DictConfig) -> RunConfig:
    """``cfg`` converted, its Hub names resolved and validated, silently (the precheck's)."""
    run_cfg = localized(cfg)
    validate(run_cfg)
    return run_cfg


def localized(cfg: DictConfig) -> RunConfig:
    """``cfg`` converted, its Hub names resolved to the files a run reads; not validated."""
    run_cfg = convert(cfg)
    localize(run_cfg)  # Hub names -> the folders they resolved to, fetched: every check reads files
    return run_cfg


def convert(cfg: DictConfig) -> RunConfig:
    """Refuse keys no schema declares and convert to typed objects, without validating (``runner --cfg job`` prints a
    config that would not run, so that the user sees why)."""
    for full_key, schema, value in _unknown_keys(cfg):
        raise ConfigError(unknown_key(full_key, schema, value))
    try:
        run_cfg = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:  # e.g. model=custom without model._target_
        raise ConfigError(explain(e)) from e
    assert isinstance(run_cfg, RunConfig)
    for key in ("path", "val_path"):  # runner's own example data, wherever runner is installed
        if isinstance(getattr(run_cfg.data, key, None), str):
            setattr(run_cfg.data, key, shipped(getattr(run_cfg.data, key)))
    return run_cfg


def _unknown_keys(node: DictConfig, prefix: str = "") -> Iterator[tuple[str, type, str | None]]:
    """Keys of typed nodes their dataclass has no field for (``+key=value`` adds one anywhere, and ``to_object`` would
    set a stray attribute); open nodes (``compile.options``, ``model=custom``, ``logger``) take any key."""
    schema = OmegaConf.get_type(node)
    fields = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    try:
        items = node.items_ex(resolve=False)
    except OmegaConfBaseException:  # a missing (???) or None node: nothing under it
        return
    for key, child in items:
        full_key = prefix + str(key)
        if fields is not None and key not in fields:
            assert isinstance(schema, type)
            yield full_key, schema, None if isinstance(child, (DictConfig, list, dict)) else _text(child)
        elif isinstance(child, DictConfig):
            yield from _unknown_keys(child, f"{full_key}.")


def _text(value: object) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def compose(overrides: Sequence[str] = (), run_dir: str | None = None,
            config_dirs: Sequence[str | Path] | None = None) -> DictConfig:
    """Compose the config the way ``runner`` does (the project's layers, then ``config_dirs``, then runner's own)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    previous = layers.config_dirs()
    if config_dirs is not None:
        layers.set_config_dirs(config_dirs)
    extra = [] if run_dir is None else [f"run_dir={run_dir}", "name=run"]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            return hydra_compose("config", overrides=[*overrides, *extra])
    finally:
        layers.set_config_dirs(previous)
