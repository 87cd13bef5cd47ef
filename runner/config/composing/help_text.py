"""What ``runner --help`` lists (``conf/hydra/help/runner.yaml`` interpolates these): the recipes, and
each config group with the options a user picks (never the ``*_schema`` nodes the options extend)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from runner.config.composing.layers import RECIPE_GROUP, default_groups, recipe_listing
from runner.config.schema.targets import is_schema_name

_rendering = [False]


@contextlib.contextmanager
def rendering_help() -> Iterator[None]:
    """While ``runner --help`` renders its template: only then do the resolvers below list anything."""
    _rendering[0] = True
    try:
        yield
    finally:
        _rendering[0] = False


def register_resolvers() -> None:
    """``${runner.recipes:}`` and ``${runner.groups:}`` for the help template; idempotent. They list only inside
    ``rendering_help``: Hydra resolves the template in every compose, and listing every group's options costs ~2 s."""
    from omegaconf import OmegaConf

    for name, resolver in (("runner.recipes", recipes_help), ("runner.groups", groups_help)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, _when_rendering(resolver))


def _when_rendering(resolver: Any) -> Any:
    def resolve() -> str:
        return resolver() if _rendering[0] else ""

    return resolve


def _escape(text: str) -> str:
    return text.replace("$", "$$")  # the help template is a string.Template


def recipes_help() -> str:
    """The recipe listing, indented under the help's Recipes heading."""
    return _escape("\n".join(f"  {line}" for line in recipe_listing()))


def _groups(loader: Any, parent: str = "") -> list[str]:
    """Every group with an option file, nested ones as ``a/b`` (as Hydra's own help walks them)."""
    from hydra.core.object_type import ObjectType

    out: list[str] = []
    for name in loader.list_groups(parent):
        group = f"{parent}/{name}" if parent else name
        if loader.get_group_options(group, ObjectType.CONFIG):
            out.append(group)
        if loader.get_group_options(group, ObjectType.GROUP):
            out += _groups(loader, group)
    return out


def group_options(loader: Any, group: str) -> list[str]:
    """The options of ``group`` a user picks: its option files, not the schemas stored beside them."""
    from hydra.core.object_type import ObjectType

    return sorted(o for o in loader.get_group_options(group, ObjectType.CONFIG) if not is_schema_name(group, o))


def groups_help() -> str:
    """One line per config group, ``group: option, ...`` (``+group=NAME`` for one the root config does not select)."""
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized():
        return ""
    loader = GlobalHydra.instance().config_loader()
    selected = set(default_groups())
    lines = []
    for group in sorted(_groups(loader)):
        if group.split("/")[0] in ("hydra", RECIPE_GROUP) or not (options := group_options(loader, group)):
            continue
        label = group if group.split("/")[0] in selected else f"{group} (+{group}=NAME)"
        lines.append(f"{label}: {', '.join(options)}")
    return _escape("\n".join(lines))
