"""Docstrings stay a sentence or two: at most 20% of runner/'s characters (issue 82; the anchors measure 16-17%)."""

from __future__ import annotations

from scripts.code_size import measure, working_tree


def test_docstrings_are_at_most_a_fifth_of_the_source() -> None:
    _, chars, docs = measure(working_tree())
    assert docs / chars <= 0.20, f"docstrings are {docs / chars:.1%} of runner/'s characters: say what and why shorter"


def test_the_measure_counts_docstrings_not_comments() -> None:
    source = '"""Doc."""\n# a comment\ndef f():\n    """Two."""\n    return 1\n'
    assert measure({"runner/m.py": source})[1:] == (len(source), len('"""Doc."""') + len('"""Two."""'))
