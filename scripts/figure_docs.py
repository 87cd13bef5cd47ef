"""The tables of docs/report.md that list figures, written from their definitions (``runner.metrics``).

Each table sits between ``<!-- figures: NAME -->`` and ``<!-- end figures -->``: NAME is a section of the
summary (``runner.telemetry.definitions.SECTIONS``: label, key and meaning of each row, in order) or
``the rest`` (every other figure runner defines, by key). Everything outside the markers is written by
hand. ``tests/test_figure_keys.py`` fails when a table is not what this writes::

    .venv/bin/python scripts/figure_docs.py          # rewrite the tables in docs/report.md
    .venv/bin/python scripts/figure_docs.py --check  # exit 1 if they are out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from runner.metrics import Metric, defined
from runner.telemetry.definitions import SECTIONS

DOCS = Path(__file__).resolve().parents[1] / "docs" / "report.md"
REST = "the rest"
"""The table of every figure the summary does not show."""
_BLOCK = re.compile(r"<!-- figures: (?P<name>[^>]+?) -->\n.*?<!-- end figures -->", re.DOTALL)


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def tables() -> dict[str, str]:
    """Every generated table by its marker's name: the summary's sections, then the rest."""
    out = {}
    for title, rows in SECTIONS:
        lines = [_row("label", "key in report.json", "what it measures"), "|---|---|---|"]
        out[title] = "\n".join(lines + [_row(f.label, f"`{f.key}`", f.meaning) for f in rows])
    shown = {f.key for _, rows in SECTIONS for f in rows}
    rest: list[Metric] = sorted((f for f in defined() if f.key not in shown), key=lambda f: f.key)
    lines = [_row("key", "what it holds"), "|---|---|"]
    out[REST] = "\n".join(lines + [_row(f"`{f.key}`", f.meaning) for f in rest])
    return out


def render(text: str) -> str:
    """``text`` (docs/report.md) with every marked table rewritten; KeyError for a marker naming no table."""
    made = tables()

    def table(match: re.Match[str]) -> str:
        name = match["name"]
        return f"<!-- figures: {name} -->\n{made[name]}\n<!-- end figures -->"

    return _BLOCK.sub(table, text)


def marked(text: str) -> list[str]:
    """The names of the tables ``text`` marks, in order."""
    return [m["name"] for m in _BLOCK.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/report.md is out of date")
    args = parser.parse_args(argv)
    text = DOCS.read_text()
    new = render(text)
    if args.check:
        return int(new != text)
    DOCS.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
