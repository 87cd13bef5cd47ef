"""runner/'s size by folder: lines, and the share of its characters that are docstrings (issue 82's measures).

    .venv/bin/python scripts/code_size.py            # the table for runner/
    .venv/bin/python scripts/code_size.py --base REV # beside the same figures at a git revision
"""

from __future__ import annotations

import argparse
import ast
import collections
import io
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def docstring_chars(source: str) -> int:
    """Characters of the module's, classes' and functions' docstrings, quotes included."""
    tree = ast.parse(source)
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    nodes = (n for n in ast.walk(tree) if isinstance(n, kinds))
    return sum(len(ast.get_source_segment(source, n.body[0]) or "") for n in nodes
               if n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
               and isinstance(n.body[0].value.value, str))


def measure(files: dict[str, str]) -> tuple[collections.Counter[str], int, int]:
    """Lines by top folder of runner/ (top-level modules as one), all characters, docstring characters."""
    lines: collections.Counter[str] = collections.Counter()
    chars = docs = 0
    for path, source in files.items():
        parts = Path(path).parts
        lines[parts[1] if len(parts) > 2 else "(top-level modules)"] += len(source.splitlines())
        chars += len(source)
        docs += docstring_chars(source)
    return lines, chars, docs


def working_tree() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "runner").rglob("*.py"))}


def at(rev: str) -> dict[str, str]:
    data = subprocess.run(["git", "archive", rev, "runner"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()  # type: ignore[union-attr]
                if m.isfile() and m.name.endswith(".py")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="a git revision to measure beside the working tree")
    args = parser.parse_args()
    now, chars, docs = measure(working_tree())
    if args.base:
        then, then_chars, then_docs = measure(at(args.base))
    else:
        then, then_chars, then_docs = now, chars, docs
    print(f"| folder | {args.base or 'now'} | now |\n|---|---|---|")
    for folder in sorted(set(now) | set(then), key=lambda f: -then.get(f, 0)):
        print(f"| {folder} | {then.get(folder, 0):,} | {now.get(folder, 0):,} |")
    print(f"| runner/ | {sum(then.values()):,} | {sum(now.values()):,} |")
    print(f"| docstrings | {then_docs / then_chars:.1%} | {docs / chars:.1%} |")


if __name__ == "__main__":
    main()
