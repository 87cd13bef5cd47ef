"""Register runner's configs with Hydra: the typed schemas (``runner_schema`` first in conf/config.yaml's defaults, and
one ``<option>_schema`` per shipped ``_target_`` option, which its YAML extends), and the search path over the layers.

The project's layers come before runner's ``conf/`` so that a project replaces an option or recipe without touching
runner. ``hydra.searchpath`` cannot do that: Hydra appends its entries after the primary config directory (they add
options, never replace one), a command-line ``hydra.searchpath`` replaces the YAML one, and a ``recipes/NAME.yaml``
directory is no ``recipe`` group to Hydra's file source. Hence a ``SearchPathPlugin`` and two sources.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.core.config_store import ConfigStore
from hydra.core.object_type import ObjectType
from hydra.core.plugins import Plugins
from hydra.plugins.config_source import ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin

from runner import hydra_internals
from runner.config.composing.help_text import register_resolvers
from runner.config.composing.layers import CONF_DIR, RECIPE_GROUP, RECIPES_DIR, ConfigLayer, same_dir, user_layers
from runner.config.composing.run_dirs import register_job_dir_resolver
from runner.config.schema import RunConfig
from runner.config.schema.targets import schema_name, target_schemas


# -- Hydra plugins ---------------------------------------------------------------------------------
class _Delegating(ConfigSource):
    """A config source that reads files through Hydra's own ``FileConfigSource``."""

    def __init__(self, provider: str, path: str) -> None:
        super().__init__(provider=provider, path=path)
        self._files = hydra_internals.file_config_source(provider, self.path)

    def available(self) -> bool:
        return os.path.isdir(self.path)


class GroupsConfigSource(_Delegating):
    """A directory of config groups whose root-level files are ignored (``runner-groups://DIR``)."""

    @staticmethod
    def scheme() -> str:
        return "runner-groups"

    def load_config(self, config_path: str) -> ConfigResult:
        return self._files.load_config(config_path)

    def is_group(self, config_path: str) -> bool:
        return self._files.is_group(config_path)

    def is_config(self, config_path: str) -> bool:
        return "/" in config_path.strip("/") and self._files.is_config(config_path)

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        if config_path.strip("/"):
            return self._files.list(config_path, results_filter)
        return [] if results_filter is ObjectType.CONFIG else self._files.list("", ObjectType.GROUP)


class RecipesConfigSource(_Delegating):
    """A directory of recipes as the ``recipe`` group (``runner-recipes://DIR``): ``NAME.yaml`` is ``+recipe=NAME``."""

    @staticmethod
    def scheme() -> str:
        return "runner-recipes"

    @staticmethod
    def _inner(config_path: str) -> str | None:
        head, _, rest = config_path.strip("/").partition("/")
        return rest if head == RECIPE_GROUP else None

    def load_config(self, config_path: str) -> ConfigResult:
        inner = self._inner(config_path)
        assert inner, config_path
        return self._files.load_config(inner)

    def is_group(self, config_path: str) -> bool:
        if not config_path.strip("/"):
            return self.available()
        inner = self._inner(config_path)
        return inner is not None and self._files.is_group(inner)

    def is_config(self, config_path: str) -> bool:
        inner = self._inner(config_path)
        return bool(inner) and self._files.is_config(inner or "")

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        if not config_path.strip("/"):
            return [RECIPE_GROUP] if results_filter in (None, ObjectType.GROUP) and self.available() else []
        inner = self._inner(config_path)
        return [] if inner is None else self._files.list(inner, results_filter)


class RunnerSearchPath(SearchPathPlugin):
    """The user's layers before runner's primary config directory, runner's ``recipes/`` after it; only for runner's
    config."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        main = next((e for e in search_path.get_path() if e.provider == "main"), None)
        if main is None or not same_dir(Path(main.path.split("://", 1)[-1]), CONF_DIR):
            return
        before_main = SearchPathQuery(provider="main")
        for layer in user_layers():
            if layer.recipes is not None and not same_dir(layer.recipes, _group_dir(layer)):
                search_path.prepend(f"runner {layer.label}", f"runner-recipes://{layer.recipes}", before_main)
            if layer.groups is not None:
                search_path.prepend(f"runner {layer.label}", f"runner-groups://{layer.groups}", before_main)
        if not same_dir(RECIPES_DIR, CONF_DIR / RECIPE_GROUP):  # a checkout links conf/recipe -> ../recipes
            search_path.append("runner", f"runner-recipes://{RECIPES_DIR}", SearchPathQuery(provider="main"))


def _group_dir(layer: ConfigLayer) -> Path | None:
    return None if layer.groups is None else layer.groups / RECIPE_GROUP


# The ConfigStore the schemas went into: storing them again (each compose) cost ~15% of a compose.
_stored_in: list[ConfigStore] = []


def register_configs() -> None:
    """Store every schema and register the search path plugins and the resolvers (the help's, a sweep job's
    directory name); idempotent."""
    cs = ConfigStore.instance()
    if not any(stored is cs for stored in _stored_in):  # Hydra's singleton, unless something replaced it
        cs.store(name="runner_schema", node=RunConfig)
        for group, schemas in target_schemas().items():
            for option, schema in schemas.items():
                # Loggers live side by side under logger.<name>; the others are the group node itself.
                node = {option: schema} if group == "logger" else schema
                cs.store(group=group, name=schema_name(option), node=node)
        _stored_in[:] = [cs]
    plugins = Plugins.instance()
    for plugin in (GroupsConfigSource, RecipesConfigSource, RunnerSearchPath):
        plugins.register(plugin)
    register_resolvers()
    register_job_dir_resolver()
