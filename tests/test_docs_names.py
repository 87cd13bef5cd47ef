"""Every module, class and function the docs and README name (``runner.a.b.name``, ``runner/a/b.py``) exists."""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"(?<![\w/.])runner(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w/.])runner/[\w/]*\w(?:\.py)?/?")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = sorted(p.name for p in (ROOT / "runner").iterdir() if (p / "__init__.py").is_file())
# docs/architecture.md alone writes paths under runner/ without it (stack/offload/hooks.py), a function after a colon
_FILE = rf"((?:{'|'.join(PACKAGES)})/[\w/]*\w\.py)(?:: (\w+)(?:\.(\w+))?)?"
FULL = re.compile(r"(?<![\w/.])runner/" + _FILE)
RELATIVE = re.compile(r"(?<![\w/.])(?:runner/)?" + _FILE)


@cache

def _names(path: Path) -> dict[str, ast.AST]:
    """The top-level names a module defines or imports."""
    out: dict[str, ast.AST] = {}
    for node in ast.parse(path.read_text()).body:
        targets: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = [(a.asname or a.name).split(".")[0] for a in node.names]
        for name in targets:
            out[name] = node
    return out


def _module(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


# Installed package data (setup.py's package_dir) and the datasets cache's folder: not paths of this checkout.
ELSEWHERE = {"runner/_conf", "runner/_recipes", "runner/_data", "runner/store/"}
PLACEHOLDERS = {"NAME", "NAMESPACE", "Class"}  # runner.models.NAME.Class: a pattern, not a name


def _imported(parts: list[str]) -> bool:
    """Whether importing the longest module prefix and reading the rest as attributes works (lazy exports, enums)."""
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def _exists(dotted: str) -> bool:
    parts = dotted.split(".")
    if PLACEHOLDERS & set(parts):
        return True
    for cut in range(len(parts), 0, -1):
        path = _module(parts[:cut])
        if path is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        node = _names(path).get(rest[0])
        if node is None:  # a submodule its package does not import, or a name made at import time
            return _module([*parts[:cut], rest[0]]) is not None or _imported(parts)
        if len(rest) == 1 or not isinstance(node, ast.ClassDef):
            return True  # an attribute of a function's result or an imported object is not looked into
        return any(getattr(item, "name", None) == rest[1] or rest[1] in {
            t.id for t in getattr(item, "targets", [getattr(item, "target", None)]) if isinstance(t, ast.Name)}
            for item in node.body)
    return False


def test_every_name_the_docs_give_exists() -> None:
    missing = []
    for page in PAGES:
        text = page.read_text()
        for m in DOTTED.finditer(text):
            name = m[0].rstrip(".")
            if not _exists(name):
                missing.append(f"{page.relative_to(ROOT)}: {name}")
        for m in PATH.finditer(text):
            if m[0] not in ELSEWHERE and not PLACEHOLDERS & set(re.split(r"[/.]", m[0])) and not (ROOT / m[0]).exists():
                missing.append(f"{page.relative_to(ROOT)}: {m[0]}")
        relative = RELATIVE if page.name == "architecture.md" else FULL
        for m in relative.finditer(text):
            path = ROOT / "runner" / m[1]
            if PLACEHOLDERS & set(re.split(r"[/.]", m[1])):
                continue
            if not path.is_file():
                missing.append(f"{page.relative_to(ROOT)}: {m[1]}")
            elif m[2] and not _exists(".".join(["runner", *m[1][:-3].split("/"), m[2], *filter(None, [m[3]])])):
                missing.append(f"{page.relative_to(ROOT)}: {m[1]}: {m[2]}")
    assert not missing, "named in the docs but not in the code:\n" + "\n".join(sorted(set(missing)))
