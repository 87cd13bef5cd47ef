"""Register runner's configs with Hydra: typed schemas, and where config files are searched.

The root schema (``runner_schema``) comes first in ``conf/config.yaml``'s defaults, so every group
option merged after it is checked against its dataclass. Open ``_target_`` groups register one
schema per shipped option (``<option>_schema``), which that option's YAML extends.

Search path: a user's project (``./conf/<group>/``, ``./recipes/``, and the directories given with
``--config-dir`` or ``hydra.searchpath``) comes *before* runner's own ``conf/`` and ``recipes/``, so
a project adds or replaces options and recipes without touching runner. Hydra puts ``--config-dir``
and ``hydra.searchpath`` after the primary config directory (where they add options but cannot
replace one); runner's ``SearchPathPlugin`` puts them first, and Hydra's own entries stay behind.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.core.config_store import ConfigStore
from hydra.core.object_type import ObjectType
from hydra.core.plugins import Plugins
from hydra.plugins.config_source import ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin

from runner.config import targets
from runner.config.schema import RunConfig

_PKG = Path(__file__).resolve().parents[1]


def _builtin(name: str) -> Path:
    """An installed wheel ships ``conf/`` and ``recipes/`` as ``runner/_conf`` and ``runner/_recipes``
    (see setup.py); a checkout or an editable install reads them at the top of the repository."""
    packaged = _PKG / f"_{name}"
    return packaged if packaged.is_dir() else _PKG.parent / name


CONF_DIR = _builtin("conf")
RECIPES_DIR = _builtin("recipes")
RECIPE_GROUP = "recipe"

_TARGET_SCHEMAS: dict[str, dict[str, type]] = {
    "model": {"gpt": targets.GPTSchema, "mlp": targets.MLPSchema},
    "data": {"text": targets.TextDataSchema, "synthetic": targets.SyntheticDataSchema},
    "optimizer": {"adamw": targets.AdamWSchema, "sgd": targets.SGDSchema},
    "scheduler": {"warmup_cosine": targets.WarmupCosineSchema},
    "logger": {
        "csv": targets.CSVLoggerSchema,
        "wandb": targets.WandbLoggerSchema,
        "tensorboard": targets.TensorBoardLoggerSchema,
    },
}


# -- where configs come from -----------------------------------------------------------------------
@dataclass(frozen=True)
class ConfigLayer:
    """One place configs come from: ``groups`` holds ``<group>/<option>.yaml`` (root-level files there
    are not read: a project's own ``conf/config.yaml`` must not replace runner's root config),
    ``recipes`` holds ``<recipe>.yaml`` files for ``+recipe=NAME``."""

    label: str
    groups: Path | None
    recipes: Path | None


_extra_dirs: list[Path] = []


def set_config_dirs(dirs: Sequence[str | Path]) -> None:
    """The directories given with ``--config-dir`` / ``hydra.searchpath`` (the entry point and
    ``compose`` set them before Hydra builds its search path)."""
    _extra_dirs[:] = [Path(d).expanduser().resolve() for d in dirs]


def config_dirs() -> list[Path]:
    return list(_extra_dirs)


def _same(a: Path | None, b: Path | None) -> bool:
    return a is not None and b is not None and a.exists() and b.exists() and a.resolve() == b.resolve()


def _project_layer(label: str, root: Path, hydra_layout: bool) -> ConfigLayer | None:
    """``root/conf`` + ``root/recipes`` (a project); else, for a directory named on the command line,
    Hydra's own layout (``root/<group>/``, recipes in ``root/recipe/``)."""
    conf, recipes = root / "conf", root / "recipes"
    if conf.is_dir() or recipes.is_dir():
        layer = ConfigLayer(label, conf if conf.is_dir() else None, recipes if recipes.is_dir() else None)
    elif hydra_layout and root.is_dir():
        recipe_group = root / RECIPE_GROUP
        layer = ConfigLayer(label, root, recipe_group if recipe_group.is_dir() else None)
    else:
        return None
    # runner's own checkout, run from its top directory: not a separate project.
    if _same(layer.groups, CONF_DIR) or _same(layer.recipes, RECIPES_DIR):
        return None
    return layer


def user_layers() -> list[ConfigLayer]:
    """The project in the current directory, then each ``--config-dir`` / ``hydra.searchpath`` directory."""
    layers = [_project_layer("./", Path.cwd(), hydra_layout=False)]
    layers += [_project_layer(str(d), d, hydra_layout=True) for d in _extra_dirs]
    return [layer for layer in layers if layer is not None]


def builtin_layer() -> ConfigLayer:
    return ConfigLayer("runner", CONF_DIR, RECIPES_DIR)


# -- Hydra plugins ---------------------------------------------------------------------------------
class _Delegating(ConfigSource):
    """A config source that reads files through Hydra's own ``FileConfigSource``."""

    def __init__(self, provider: str, path: str) -> None:
        from hydra._internal.core_plugins.file_config_source import FileConfigSource

        super().__init__(provider=provider, path=path)
        self._files = FileConfigSource(provider=provider, path=f"file://{self.path}")

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
    """A directory of recipe files presented as the ``recipe`` group (``runner-recipes://DIR``):
    ``recipes/NAME.yaml`` is ``+recipe=NAME``, as in runner's own layout."""

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
    """Puts the user's layers before runner's primary config directory (provider ``main``) and
    runner's ``recipes/`` right after it. Only for runner's own config: another Hydra app in the
    same process keeps its search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        main = next((e for e in search_path.get_path() if e.provider == "main"), None)
        if main is None or not _same(Path(main.path.split("://", 1)[-1]), CONF_DIR):
            return
        before_main = SearchPathQuery(provider="main")
        for layer in user_layers():
            if layer.recipes is not None and not _same(layer.recipes, _group_dir(layer)):
                search_path.prepend(f"runner {layer.label}", f"runner-recipes://{layer.recipes}", before_main)
            if layer.groups is not None:
                search_path.prepend(f"runner {layer.label}", f"runner-groups://{layer.groups}", before_main)
        if not _same(RECIPES_DIR, CONF_DIR / RECIPE_GROUP):  # a checkout links conf/recipe -> ../recipes
            search_path.append("runner", f"runner-recipes://{RECIPES_DIR}", SearchPathQuery(provider="main"))


def _group_dir(layer: ConfigLayer) -> Path | None:
    return None if layer.groups is None else layer.groups / RECIPE_GROUP


def register_configs() -> None:
    """Store every schema and register the search path plugins; idempotent."""
    cs = ConfigStore.instance()
    cs.store(name="runner_schema", node=RunConfig)
    for group, schemas in _TARGET_SCHEMAS.items():
        for option, schema in schemas.items():
            # Loggers live side by side under logger.<name>; the others are the group node itself.
            node = {option: schema} if group == "logger" else schema
            cs.store(group=group, name=f"{option}_schema", node=node)
    plugins = Plugins.instance()
    for plugin in (GroupsConfigSource, RecipesConfigSource, RunnerSearchPath):
        plugins.register(plugin)
    _register_resolvers()


def _register_resolvers() -> None:
    """``${runner.recipes:}``: the recipe list with descriptions, for ``--help``'s template."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("runner.recipes"):
        OmegaConf.register_new_resolver("runner.recipes", _recipes_help)


def _recipes_help() -> str:
    from runner.config.load import list_recipes

    items = list_recipes()
    width = max((len(r.name) for r in items), default=0)
    lines = [f"  {r.name:<{width}}  {r.description}  [{r.origin}]" for r in items if r.active]
    return "\n".join(lines).replace("$", "$$")  # the help template is a string.Template
