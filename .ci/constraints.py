"""Write constraints.txt: the installed version of every package runner[dev,tune,trace] pulls in, and nothing else.

``pip freeze`` would also pin whatever was installed into the venv by hand; this starts from
pyproject.toml's dependencies and every extra (the installed runner's metadata can be older than the
file) and walks the installed packages' metadata down from there, so only what runner installs is pinned.
torch stays pinned to the local CPU wheel's version (without its ``+cpu`` tag, which the pin matches).
torchvision is never pinned: each release requires one torch (0.26.0: 2.11.0, 0.28.0: 2.13.0, 0.29.x: >=2.14), so
pip picks the one the torch beside it takes. An extra whose packages this venv cannot hold (``vision``: timm imports
torchvision, which has no build for the local CPU torch on PyPI) keeps its pins from the current constraints.txt.

Usage: .venv/bin/python .ci/constraints.py > constraints.txt   (or: make constraints)
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
from pathlib import Path

import tomllib  # Python 3.11+, as .venv and CI have
from packaging.requirements import Requirement

HEADER = """\
# Pinned versions for reproducible installs (CI and `make`): exactly what runner and its extras install.
# torch is the local CPU wheel (2.13.0); pyproject.toml keeps ranges (torch 2.11-2.15: docs/install.md).
# Installing next to another torch: leave the torch line out (make test-versions does).
# Regenerate from an up-to-date .venv: make constraints
"""
# pip itself, and the build backend pip provides; freeze never pins them either. torchvision: matched to torch by pip.
NOT_PINNED = {"pip", "setuptools", "wheel", "torchvision"}
CONSTRAINTS = Path(__file__).resolve().parents[1] / "constraints.txt"


def kept_pins() -> dict[str, str]:
    """Name -> version of every pin in the current constraints.txt (for packages this venv does not hold)."""
    lines = CONSTRAINTS.read_text().splitlines() if CONSTRAINTS.exists() else []
    return {_norm(n): v for n, _, v in (ln.partition("==") for ln in lines if "==" in ln and not ln.startswith("#"))}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(requirements: list[str]) -> dict[str, str]:
    """Installed name -> version of every package ``requirements`` need, transitively."""
    pinned: dict[str, str] = {}
    kept = kept_pins()
    seen: set[tuple[str, frozenset[str]]] = set()
    stack = [(req.name, frozenset(req.extras)) for req in map(Requirement, requirements)]
    while stack:
        name, wanted = stack.pop()
        if (_norm(name), wanted) in seen or _norm(name) in NOT_PINNED:
            continue
        seen.add((_norm(name), wanted))
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            if _norm(name) not in kept:
                raise SystemExit(f"{name} is not installed here and has no pin in constraints.txt to keep") from None
            pinned[name] = kept[_norm(name)]
            continue
        pinned[dist.metadata["Name"]] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in wanted | {""}):
                stack.append((req.name, frozenset(req.extras)))
    return {n: v for n, v in pinned.items() if _norm(n) not in NOT_PINNED}


def main() -> None:
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    extras = [req for group in project["optional-dependencies"].values() for req in group]
    pins = closure([*project["dependencies"], *extras])
    lines = [f"{name}=={version.split('+')[0]}" for name, version in pins.items()]
    sys.stdout.write(HEADER + "\n".join(sorted(lines, key=str.lower)) + "\n")


if __name__ == "__main__":
    main()
