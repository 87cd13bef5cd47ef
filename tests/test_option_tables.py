"""Each option of ``Scope``, ``ShapePolicy`` and ``OffloadStrategy`` declares what it does in one place, its row in
``runner.config.schema.options``; the code asks the row. These tests read runner's source and fail on a membership test
(``policy is ShapePolicy.bucket``, ``scope in (Scope.step, ...)``, ``o != OffloadStrategy.cpu.value``), a
collection of members tested against, or a second per-option table, anywhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runner.config.schema.options import OffloadStrategy, Scope, ShapePolicy

ROOT = Path(__file__).resolve().parents[1]
ENUMS = {"Scope", "ShapePolicy", "OffloadStrategy"}
TABLES = ROOT / "runner" / "config" / "schema" / "options.py"


def _member(node: ast.AST) -> bool:
    """``Scope.step`` or anything read off it (``Scope.step.value``)."""
    while isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id in ENUMS:
            return True
        node = node.value
    return False


def _members(node: ast.AST) -> bool:
    """A member, or a literal collection holding one."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_member(e) for e in node.elts)
    return _member(node)


def membership_tests(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every place ``source`` decides by which member it holds instead of asking the row."""
    tree = ast.parse(source)
    collections = {t.id for node in tree.body if isinstance(node, ast.Assign) and _members(node.value)
                   for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = [o for o in operands if isinstance(o, ast.Name) and o.id in collections]
            if any(_members(o) for o in operands) or named:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Dict) and any(k is not None and _member(k) for k in node.keys):
            found.append((node.lineno, ast.unparse(node)[:100]))
        elif isinstance(node, ast.MatchValue) and _member(node.value):
            found.append((node.lineno, ast.unparse(node.value)))
    return found


def test_no_membership_test_on_the_options_outside_their_tables() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line}: {code}"
                 for path in sorted((ROOT / "runner").rglob("*.py")) if path != TABLES
                 for line, code in membership_tests(path.read_text())]
    assert not offenders, ("decide by the option's row (runner/config/schema/options.py), not by which option it is:\n"
                           + "\n".join(offenders))


@pytest.mark.parametrize("code", [
    "if policy is ShapePolicy.bucket: pass",
    "x = scope in (Scope.step, Scope.step_backward)",
    "y = [o for o in opts if o != OffloadStrategy.cpu.value]",
    "STEPS = (Scope.step, Scope.step_backward)\nz = target in STEPS",
    "NAMES = {Scope.none: 'nothing'}",
    "match scope:\n    case Scope.step:\n        pass",
])
def test_the_scan_finds_each_kind_of_membership_test(code: str) -> None:
    assert membership_tests(code), code


def test_the_scan_allows_values_and_rows() -> None:
    code = ("CHOICES = [Scope.model, Scope.step]\nplan = replace(plan, target=Scope.model)\n"
            "if scope.row.whole_step and policy.row.mark is Mark.none: pass")
    assert membership_tests(code) == []


def test_every_option_has_a_row_and_keeps_its_name_as_value() -> None:
    for enum in (Scope, ShapePolicy, OffloadStrategy):
        for member in enum:
            assert member.value == member.name and member.row is not None
            assert enum(member.name) is member and enum[member.name] is member
    assert [s.row.report_name for s in Scope] == ["nothing", "submodules", "step", "step_and_backward", "blocks"]
    assert {s for s in ShapePolicy if not s.row.ranks_agree} == {ShapePolicy.static, ShapePolicy.bucket}
    assert {o.row.codec.name for o in OffloadStrategy if o.row.codec} == {"bf16", "fp8"}
