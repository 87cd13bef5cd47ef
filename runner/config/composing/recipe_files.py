"""The recipes runner can see (``+recipe=NAME``): the user's project first, then runner's own; the
one listing ``runner --list-recipes`` and ``runner --help`` print."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.config.composing.layers import builtin_layer, user_layers


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
