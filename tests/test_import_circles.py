"""No import circles in ``runner/`` or ``benchmarks/``: a module that imports another (at the top or inside a
function: a lazy import hides a circle, it does not remove it) never gets imported back by it, directly or through
others. import-linter's layers keep packages apart; this keeps the modules inside a layer (and the benchmarks, run as
scripts that import the modules under benchmarks/ by bare name) from circling."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package in ("runner", "benchmarks"):
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _installed_elsewhere(name: str) -> bool:
    """Whether a bare name is importable from somewhere other than benchmarks/ (an installed package, the standard
    library, runner). A folder a test imported earlier in this process (``contestants``) is found in ``sys.modules``,
    at its own path under benchmarks/."""
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path[:] = saved
    # A folder without __init__.py (docs/ at the repository's root) is a namespace, no library: origin None.
    if spec is None or spec.origin is None:
        return False
    return ROOT / "benchmarks" not in Path(spec.origin).resolve().parents


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``runner``/``benchmarks`` it imports anywhere in its file (``from pkg import mod``
    is an import of ``pkg.mod``; a benchmark's bare sibling name is ``benchmarks.<name>``)."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                names = [s for s in subs if s in modules or f"benchmarks.{s}" in modules]
                names += [base] if len(names) < len(subs) else []
            for name in names:
                if name in modules:
                    target = name
                elif module.startswith("benchmarks.") and f"benchmarks.{name}" in modules \
                        and not _installed_elsewhere(name.split(".")[0]):
                    target = f"benchmarks.{name}"
                else:
                    continue
                if target != module:
                    edges[module].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_finder_finds_a_circle_and_a_lazy_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    edges = _edges(_modules())
    assert "runner.peft.files" in edges["runner.peft.inject"]  # a lazy or top import, either way an edge
    assert "benchmarks.contestants.workload" in edges["benchmarks.contestants.compare"]  # a name under benchmarks/
    assert "benchmarks.harness.fork_server" in edges["benchmarks.compare"]  # `from harness import fork_server`
    assert "benchmarks.peft" not in edges["benchmarks.contestants.adapters"]  # `import peft` there is HF's


def test_no_benchmark_module_is_named_like_a_library() -> None:
    """A script run from benchmarks/ has that folder first on ``sys.path``, so a module or folder there named like a
    library (benchmarks/peft.py beside HF's peft) shadows it for every import, and reads as an import circle."""
    clashes = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").rglob("*")
                     if (p.suffix == ".py" and p.stem != "__init__" or (p / "__init__.py").is_file())
                     and "__pycache__" not in p.parts and _installed_elsewhere(p.stem))
    assert not clashes, f"named like an importable library (rename them): {clashes}"


def test_runner_and_benchmarks_have_no_import_circle() -> None:
    found = circles(_edges(_modules()))
    assert not found, "import circles (break each by moving what both need down, or a function to its owner):\n" + \
        "\n".join(" <-> ".join(c) for c in found)
