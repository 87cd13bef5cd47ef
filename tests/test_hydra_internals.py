"""Pins every Hydra private runner touches (runner.hydra_internals) against the installed Hydra, and
the parts of Hydra's public surface whose exact shape runner's messages and help depend on.

A Hydra upgrade that moves the argument parser, the file config source or ``_locate``, or rewords
the hint runner reads a refused override from, fails here by name.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.object_type import ObjectType
from hydra.errors import MissingConfigException
from hydra.plugins.config_source import ConfigSource
from omegaconf.errors import OmegaConfBaseException

from runner import hydra_internals
from runner.config import CONF_DIR
from runner.config.composing.store import register_configs
from runner.config.schema import TrainerConfig
from runner.models.gpt import GPT


def test_args_parser_is_the_one_hydra_main_reads_argv_with() -> None:
    assert "get_args_parser()" in inspect.getsource(importlib.import_module("hydra.main"))
    args = hydra_internals.args_parser().parse_args(["-m", "--cfg", "job", "--config-dir", "d", "+recipe=smoke"])
    # Every attribute runner's precheck reads.
    for name in ("help", "hydra_help", "cfg", "info", "shell_completion", "config_path", "config_name",
                 "experimental_rerun", "config_dir", "overrides", "multirun"):
        assert hasattr(args, name), name
    assert args.cfg == "job" and args.config_dir == "d" and args.overrides == ["+recipe=smoke"] and args.multirun


def test_file_config_source_reads_a_directory_of_groups() -> None:
    source = hydra_internals.file_config_source("test", str(CONF_DIR))
    assert isinstance(source, ConfigSource) and source.scheme() == "file"
    assert source.path == str(CONF_DIR)
    assert source.is_group("compile") and source.is_config("compile/step") and not source.is_config("compile/nope")
    assert "step" in source.list("compile", ObjectType.CONFIG)
    assert "compile" in source.list("", ObjectType.GROUP)
    assert source.load_config("compile/step").config["scope"] == "step"


def test_locate_imports_what_instantiate_would() -> None:
    assert hydra_internals.locate("runner.models.gpt.GPT") is GPT
    assert hydra_internals.locate("pathlib.Path") is Path
    with pytest.raises(ImportError):
        hydra_internals.locate("no_such_package_here.Net")
    with pytest.raises(ImportError):
        hydra_internals.locate("pathlib.NoSuchThing")


@pytest.fixture()
def composing():
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        yield


def test_a_refused_override_is_quoted_in_hydras_hint(composing: None) -> None:
    with pytest.raises(Exception) as info:
        compose("config", overrides=["trainer.max_step=5"])
    chain = [info.value, info.value.__cause__]
    assert hydra_internals.refused_override("\n".join(str(c) for c in chain)) == "trainer.max_step=5"
    assert hydra_internals.refused_override("no hint here") is None
    # What runner.config.composing.messages reads to name the typed node and its fields.
    cause = info.value.__cause__
    assert isinstance(cause, OmegaConfBaseException)
    assert (cause.object_type, cause.key, cause.full_key) == (TrainerConfig, "max_step", "trainer.max_step")


def test_a_missing_option_names_its_file_and_the_groups_options(composing: None) -> None:
    with pytest.raises(MissingConfigException) as info:
        compose("config", overrides=["compile=stepp"])
    assert info.value.missing_cfg_file == "compile/stepp"
    assert {"step", "blocks"} <= set(info.value.options or [])


def test_help_template_variables_and_config_loader(composing: None) -> None:
    """conf/hydra/help/runner.yaml uses $FLAGS_HELP; runner's group list reads Hydra's config loader."""
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra

    assert "FLAGS_HELP=" in inspect.getsource(Hydra.get_help)
    assert "$FLAGS_HELP" in (CONF_DIR / "hydra" / "help" / "runner.yaml").read_text()
    loader = GlobalHydra.instance().config_loader()
    assert "compile" in loader.list_groups("")
    assert "step" in loader.get_group_options("compile", ObjectType.CONFIG)


def test_no_other_runner_module_names_hydra_internal() -> None:
    package = Path(hydra_internals.__file__).parent
    others = [str(p.relative_to(package)) for p in package.rglob("*.py")
              if p.name != "hydra_internals.py" and "hydra._internal" in p.read_text(encoding="utf-8")]
    assert others == []
