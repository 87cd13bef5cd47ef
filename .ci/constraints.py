"""Write constraints.txt: the installed version of every package runner[dev,tune,trace] pulls in, and nothing else.

``pip freeze`` would also pin whatever was installed into the venv by hand; this starts from
pyproject.toml's dependencies and every extra (the installed runner's metadata can be older than the
file) and walks the installed packages' metadata down from there, so only what runner installs is pinned.
torch stays pinned to the local CPU wheel's version (without its ``+cpu`` tag, which the pin matches).

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
# pip itself, and the build backend pip provides; freeze never pins them either.
NOT_PINNED = {"pip", "setuptools", "wheel"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(requirements: list[str]) -> dict[str, str]:
    """Installed name -> version of every package ``requirements`` need, transitively."""
    pinned: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    stack = [(req.name, frozenset(req.extras)) for req in map(Requirement, requirements)]
    while stack:
        name, wanted = stack.pop()
        if (_norm(name), wanted) in seen:
            continue
        seen.add((_norm(name), wanted))
        dist = md.distribution(name)
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
