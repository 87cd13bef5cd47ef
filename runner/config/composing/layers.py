"""Where config files and recipes come from: the user's project layers first (``./conf/<group>/`` and
``./recipes/``, then each ``--config-dir`` or ``hydra.searchpath`` directory), then runner's own ``conf/`` and
``recipes/``; and the recipes a run can see, the one listing ``--list-recipes`` and ``--help`` print."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

_PKG = Path(__file__).resolve().parents[2]  # runner/ (this is runner/config/composing/layers.py)


def _builtin(name: str) -> Path:
    """A wheel ships ``conf/`` and ``recipes/`` as ``runner/_conf`` and ``runner/_recipes``; a checkout has them on
    top."""
    packaged = _PKG / f"_{name}"
    return packaged if packaged.is_dir() else _PKG.parent / name


CONF_DIR = _builtin("conf")
RECIPES_DIR = _builtin("recipes")
RECIPE_GROUP = "recipe"


@dataclass(frozen=True)
class ConfigLayer:
    """One place configs come from: ``groups`` (``<group>/<option>.yaml``; root-level files are not read, so a project's
    ``conf/config.yaml`` cannot replace runner's) and ``recipes`` (``<recipe>.yaml``)."""

    label: str
    groups: Path | None
    recipes: Path | None


_extra_dirs: list[Path] = []


def set_config_dirs(dirs: Sequence[str | Path]) -> None:
    """The ``--config-dir`` / ``hydra.searchpath`` directories, set before Hydra builds its search path."""
    _extra_dirs[:] = [Path(d).expanduser().resolve() for d in dirs]


def config_dirs() -> list[Path]:
    """The directories last given to :func:`set_config_dirs`."""
    return list(_extra_dirs)


def same_dir(a: Path | None, b: Path | None) -> bool:
    """Both exist and are the same directory."""
    return a is not None and b is not None and a.exists() and b.exists() and a.resolve() == b.resolve()


def _project_layer(label: str, root: Path, hydra_layout: bool) -> ConfigLayer | None:
    """``root/conf`` + ``root/recipes``; else, for a directory named on the command line, Hydra's ``root/<group>/``."""
    conf, recipes = root / "conf", root / "recipes"
    if conf.is_dir() or recipes.is_dir():
        layer = ConfigLayer(label, conf if conf.is_dir() else None, recipes if recipes.is_dir() else None)
    elif hydra_layout and root.is_dir():
        recipe_group = root / RECIPE_GROUP
        layer = ConfigLayer(label, root, recipe_group if recipe_group.is_dir() else None)
    else:
        return None
    # runner's own checkout, run from its top directory: not a separate project.
    if same_dir(layer.groups, CONF_DIR) or same_dir(layer.recipes, RECIPES_DIR):
        return None
    return layer


def user_layers() -> list[ConfigLayer]:
    """The project in the current directory, then each ``--config-dir`` / ``hydra.searchpath`` directory."""
    layers = [_project_layer("./", Path.cwd(), hydra_layout=False)]
    layers += [_project_layer(str(d), d, hydra_layout=True) for d in _extra_dirs]
    return [layer for layer in layers if layer is not None]


def builtin_layer() -> ConfigLayer:
    """runner's own ``conf/`` and ``recipes/``."""
    return ConfigLayer("runner", CONF_DIR, RECIPES_DIR)


def default_groups() -> list[str]:
    """The groups conf/config.yaml selects (``GROUP=OPTION``); any other is added with ``+GROUP=OPTION``."""
    root = yaml.safe_load((CONF_DIR / "config.yaml").read_text(encoding="utf-8")) or {}
    entries = [e for e in root.get("defaults", []) if isinstance(e, dict)]
    return [key for e in entries for key in e if not key.startswith(("override ", "hydra"))]


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


def recipe_listing() -> list[str]:
    """Every recipe, one line each, under a line naming where it comes from (the project's first:
    they win); a replaced recipe names the file that replaces it."""
    items = list_recipes()
    width = max((len(r.name) for r in items), default=0)
    lines: list[str] = []
    origin = None
    for r in items:
        if r.origin != origin:
            origin = r.origin
            lines.append(f"recipes from {origin}{' (this project)' if origin.startswith('./') else ''}:")
        note = "" if r.active else f"  (replaced by {next(o.origin for o in items if o.name == r.name)}/{r.name}.yaml)"
        lines.append(f"  {r.name:<{width}}  {r.description}{note}")
    return lines
