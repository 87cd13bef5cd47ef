"""Every metric key runner writes is a row of ``runner.metrics``' table (key, label, meaning), and docs/report.md
lists what the table says, not a copy that drifts."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from runner.metrics import _ROWS, KEY, METRICS, Metric, defined, metric
from runner.telemetry import definitions
from scripts.figure_docs import REST, marked, render, tables

ROOT = Path(__file__).resolve().parents[1]
NAMESPACES = ("perf", "compile", "cudagraphs", "dynamic", "offload", "memory", "run", "train", "val", "data",
              "reliability", "trace", "ranks", "tune", "eval", "peft", "loss", "objective", "rewards", "logps")
LITERAL_KEY = re.compile(rf"^({'|'.join(NAMESPACES)})/[a-z0-9_/]*$")
"""A figure key, a per-rank key or a namespace prefix (``ranks/``, the start of ``f"offload/{name}"``)."""


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of every string that is a statement of its own: module, class, function and attribute docstrings."""
    return {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def _literal_keys(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: 'key'`` of every string in ``path`` that is a figure key, outside docstrings."""
    tree = ast.parse(path.read_text(), filename=str(path))
    allowed = _docstrings(tree)
    return [f"{path.relative_to(root)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in allowed
            and LITERAL_KEY.match(node.value)]


def test_every_key_a_runner_module_writes_is_defined() -> None:
    """A metric key in code is a string (``figures["perf/speedup_x"]``); each one is in ``runner.metrics``' table,
    or the start of keys it holds (``f"offload/{name}"``): a misspelt key fails here."""
    found = [hit for path in sorted((ROOT / "runner").rglob("*.py")) if path.name != "metrics.py"
             for hit in _literal_keys(path)
             if not any(key.startswith(ast.literal_eval(hit.split(": ", 1)[1])) for key in METRICS)]
    assert not found, "not in runner/metrics.py's table:\n" + "\n".join(found)


def test_the_scan_sees_literals_and_f_strings_but_not_docstrings(tmp_path: Path) -> None:
    """The scan above finds what it is meant to: a key in code or an f-string, not one in a docstring."""
    module = tmp_path / "m.py"
    module.write_text('"""Reads ``perf/speedup_x``: perf/step_ms"""\n'
                      'def f(figures, k):\n'
                      '    """compile/time_s"""\n'
                      '    figures["perf/speedup_x"] = 1\n'
                      '    return figures.get(f"offload/{k}")\n')
    hits = sorted(h.split(": ", 1)[1] for h in _literal_keys(module, tmp_path))
    assert hits == ["'offload/'", "'perf/speedup_x'"]


def test_each_key_is_defined_once_with_its_namespace() -> None:
    assert len({row[0] for row in _ROWS}) == len(_ROWS) == len(METRICS)
    assert all(KEY.match(key) and key.split("/")[0] in NAMESPACES for key in METRICS)


def test_every_figure_has_a_one_line_meaning() -> None:
    for f in defined():
        assert f.meaning.strip() == f.meaning and f.meaning, f.key
        assert "|" not in f.meaning + f.label, f"{f.key}: a '|' breaks the tables of docs/report.md"
        assert LITERAL_KEY.match(f.key), f.key


def test_the_summary_reads_the_definitions() -> None:
    """SECTIONS (console table, report.md) and FIGURES (legends) hold the definitions themselves, each
    row with a label; the old names stay importable from runner.telemetry.definitions."""
    assert definitions.Metric is Metric
    rows = [f for _, section in definitions.SECTIONS for f in section]
    assert all(f is metric(f.key) and f.label.strip() for f in rows)
    assert all(f is metric(key) for key, f in definitions.FIGURES.items())


def test_docs_report_tables_are_written_from_the_definitions() -> None:
    """docs/report.md marks one table per summary section and one for the rest, each exactly what
    ``scripts/figure_docs.py`` writes from the definitions (run it to update them)."""
    text = (ROOT / "docs" / "report.md").read_text()
    assert marked(text) == [title for title, _ in definitions.SECTIONS] + [REST]
    assert render(text) == text, "docs/report.md is out of date: .venv/bin/python scripts/figure_docs.py"
    listed = "\n".join(tables().values())
    assert all(f"`{f.key}`" in listed for f in defined())


def test_every_key_the_docs_name_is_defined() -> None:
    """A key named in the docs (in backticks) is one runner reports: a misspelt key in the docs fails here."""
    keys = {f.key for f in defined()}
    pattern = re.compile(rf"`(({'|'.join(NAMESPACES)})/[a-z0-9_/]*[a-z0-9_])`")
    unknown = [f"{path.relative_to(ROOT)}: {m[1]}"
               for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
               for m in pattern.finditer(path.read_text()) if m[1] not in keys]
    assert not unknown, "\n".join(unknown)
