"""Every tensor comparison in the tests has a tolerance a float32 computation can keep on every CPU.

``tests/tolerance.py`` says why: two different computations of the same math round differently on AVX2 and
AVX-512 machines, so a tolerance read off one machine fails on the next. This test reads the test files (no
import, no run) and fails on a ``torch.testing.assert_close`` or ``allclose`` that leaves its tolerances to the
defaults (``assert_close``'s float32 default, rtol 1.3e-6, is one machine's rounding) or that writes one below
the floors (``MIN_RTOL``, ``MIN_ATOL``); tolerances computed by ``drift`` pass. Bitwise comparisons stay with
``torch.equal``, where the same kernels run on the same inputs.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.tolerance import EPS32, MIN_ATOL, MIN_RTOL, drift

TESTS = Path(__file__).resolve().parent
COMPARISONS = {"assert_close", "allclose"}


def _number(node: ast.expr) -> float | None:
    """The value of a literal number (``1e-6``, ``-0.0``), else None (a name or a computed tolerance)."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return float(value) if isinstance(value, (int, float)) else None


def problems_in(source: str, name: str) -> list[str]:
    """The comparisons of ``source`` (a test file's text) that break the rule, one line each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        if func not in COMPARISONS:
            continue
        where = f"{name}:{node.lineno} {func}"
        keywords = {k.arg: k.value for k in node.keywords}
        if None in keywords:  # **tol.kwargs: computed by tests/tolerance.py
            continue
        if "rtol" not in keywords or "atol" not in keywords:
            found.append(f"{where}: give rtol and atol (tests/tolerance.py: drift), not the defaults")
            continue
        rtol, atol = _number(keywords["rtol"]), _number(keywords["atol"])
        if rtol == 0 and atol == 0:
            found.append(f"{where}: rtol=0, atol=0 is torch.equal: use it, with a comment on why it is exact")
        elif rtol is not None and 0 < rtol < MIN_RTOL:
            found.append(f"{where}: rtol={rtol:g} is below {MIN_RTOL:g}, one CPU's rounding")
        elif atol is not None and 0 < atol < MIN_ATOL:
            found.append(f"{where}: atol={atol:g} is below {MIN_ATOL:g}, one CPU's rounding")
    return found


def test_every_tensor_comparison_in_the_tests_has_a_tolerance_for_every_cpu() -> None:
    problems = [p for path in sorted(TESTS.rglob("*.py"))
                for p in problems_in(path.read_text(), str(path.relative_to(TESTS)))]
    assert not problems, "\n".join(problems)


def test_the_rule_catches_what_failed_on_an_avx512_machine() -> None:
    """The comparison that failed on an AMD EPYC with AVX-512 (1.45e-7 at atol 1e-7), the defaults, and an
    exact comparison spelt as a tolerance are refused; computed and sized tolerances pass."""
    bad = """
torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
torch.testing.assert_close(a, b)
torch.allclose(a, b, rtol=0, atol=0)
"""
    good = """
torch.testing.assert_close(a, b, **STEPS_TOL.kwargs)
torch.testing.assert_close(a, b, rtol=1e-4, atol=0)
torch.allclose(a, b, rtol=tol.rtol, atol=tol.atol)
"""
    assert [p.split(":")[1].split()[0] for p in problems_in(bad, "x")] == ["2", "3", "4"]
    assert problems_in(good, "x") == []


def test_drift_grows_with_steps_and_depth_and_has_floors() -> None:
    assert drift(49, 24).rtol == 49 * 24 * EPS32  # the graph-safe step's 49 updates
    assert drift(1, 1).rtol == MIN_RTOL and drift(1, 1).atol == MIN_ATOL
    assert drift(100, 8, magnitude=10).atol == 10 * drift(100, 8).atol
